package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// specprof runs as root and writes where it is told, often in directories
// that others can write to (/tmp, a shared working directory). A link
// planted there must not make it write wherever the link points, nor may it
// write over a file it did not create. So the output directory is created
// fresh (or taken empty), checked writable before the command starts, held
// open, and every output file is created by name relative to it without
// following links and never over an existing file; --force lets a session
// write into a non-empty directory, replacing files of the same names.

// defaultOutParent holds the default output directories, one per session.
const defaultOutParent = "specprof-out"

// outDir is a session's output directory, held open.
type outDir struct {
	path  string // as given, for messages
	fd    int
	force bool
	// parent and name locate the directory when specprof created it: if
	// the session ends without writing to it, it is removed again.
	parent  int
	name    string
	created bool
	wrote   bool
}

// openOutDir opens the output directory path ("" for the default,
// ./specprof-out/<time>), creating it if it does not exist. An existing
// directory must be empty unless force is set; a path that is a symbolic
// link, or not a directory, is refused, and so is a directory that cannot
// be written to.
func openOutDir(path string, force bool) (_ *outDir, err error) {
	d := &outDir{fd: -1, parent: -1, force: force}
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	if path == "" {
		err = d.createDefault()
	} else {
		err = d.open(path)
	}
	if err != nil {
		return nil, err
	}
	if !d.created {
		if err := d.checkEmpty(); err != nil {
			return nil, err
		}
	}
	// Root passes permission bits, so the mode says little: a read-only
	// file system (or, for a user given capabilities, the permissions)
	// shows when a file is created.
	probe := fmt.Sprintf(".specprof-write-check-%d", os.Getpid())
	fd, err := openBeneath(d.fd, probe)
	if err != nil {
		return nil, fmt.Errorf("output directory %s is not writable: %w", d.path, err)
	}
	unix.Close(fd)
	if err := unix.Unlinkat(d.fd, probe, 0); err != nil {
		return nil, fmt.Errorf("output directory %s: remove %s: %w", d.path, probe, err)
	}
	return d, nil
}

// createDefault creates ./specprof-out/<time>, with a suffix when a session
// of the same second has it. specprof-out itself must not be a link.
func (d *outDir) createDefault() error {
	if err := os.Mkdir(defaultOutParent, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create output directory %s: %w", defaultOutParent, err)
	}
	pfd, err := openDir(unix.AT_FDCWD, defaultOutParent)
	if err != nil {
		return fmt.Errorf("default output directory ./%s/<time>: %w", defaultOutParent, err)
	}
	d.parent = pfd
	base := time.Now().Format("20060102-150405")
	for i := 1; ; i++ {
		name := base
		if i > 1 {
			name = fmt.Sprintf("%s-%d", base, i)
		}
		d.path = filepath.Join(defaultOutParent, name)
		err := unix.Mkdirat(pfd, name, 0o755)
		if err == nil {
			d.name, d.created = name, true
			d.fd, err = openDir(pfd, name)
			return err
		}
		if !errors.Is(err, unix.EEXIST) || i == 100 {
			return fmt.Errorf("create output directory %s: %w", d.path, err)
		}
	}
}

// open opens (or creates) the directory the user named. Links in the
// components above it are the user's to choose; the directory itself must
// not be one.
func (d *outDir) open(path string) error {
	d.path = path
	clean := filepath.Clean(path)
	parent, name := filepath.Dir(clean), filepath.Base(clean)
	if name == "." || name == ".." || name == "/" {
		// The working directory or one above it: it exists, and is not
		// a link of specprof's making.
		fd, err := unix.Open(clean, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open output directory %s: %w", path, err)
		}
		d.fd = fd
		return nil
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("create output directory %s: %w", path, err)
	}
	pfd, err := unix.Open(parent, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the directory of %s: %w", path, err)
	}
	d.parent = pfd
	err = unix.Mkdirat(pfd, name, 0o755)
	switch {
	case err == nil:
		d.name, d.created = name, true
	case !errors.Is(err, unix.EEXIST):
		return fmt.Errorf("create output directory %s: %w", path, err)
	}
	d.fd, err = openDir(pfd, name)
	if err != nil {
		return fmt.Errorf("-o %s: %w", path, err)
	}
	return nil
}

// openDir opens the directory name in dirfd, refusing a link.
func openDir(dirfd int, name string) (int, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOTDIR) {
		// O_DIRECTORY fails a link with ENOTDIR before O_NOFOLLOW's ELOOP.
		var st unix.Stat_t
		if unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			err = unix.ELOOP
		}
	}
	switch {
	case errors.Is(err, unix.ELOOP):
		return -1, fmt.Errorf("%s is a symbolic link: specprof does not write through links; give a real directory", name)
	case errors.Is(err, unix.ENOTDIR):
		return -1, fmt.Errorf("%s is not a directory", name)
	case err != nil:
		return -1, fmt.Errorf("open output directory %s: %w", name, err)
	}
	return fd, nil
}

// checkEmpty refuses a directory that holds anything, unless --force.
func (d *outDir) checkEmpty() error {
	if d.force {
		return nil
	}
	dup, err := unix.Dup(d.fd)
	if err != nil {
		return fmt.Errorf("read output directory %s: %w", d.path, err)
	}
	f := os.NewFile(uintptr(dup), d.path)
	defer f.Close()
	names, err := f.Readdirnames(4)
	if err != nil && len(names) == 0 && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read output directory %s: %w", d.path, err)
	}
	if len(names) > 0 {
		more := ""
		if len(names) > 3 {
			names, more = names[:3], ", …"
		}
		return fmt.Errorf("output directory %s is not empty (it holds %s%s): give a new or empty directory, or --force to write into it, replacing files of the same names",
			d.path, strings.Join(names, ", "), more)
	}
	return nil
}

// join is the path of an output file, for messages.
func (d *outDir) join(name string) string { return filepath.Join(d.path, name) }

// create creates the output file name in the directory. It never follows a
// link and never opens an existing file: with --force, what is there is
// removed first (a link is removed, not followed) and the file created
// anew.
func (d *outDir) create(name string) (*os.File, error) {
	d.wrote = true
	return createIn(d.fd, d.join(name), name, d.force)
}

// createIn creates name in the directory dirfd (path is the file's path,
// for messages).
func createIn(dirfd int, path, name string, force bool) (*os.File, error) {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return nil, fmt.Errorf("create %s: not a file name", path)
	}
	if force {
		if err := unix.Unlinkat(dirfd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return nil, fmt.Errorf("replace %s: %w", path, err)
		}
	}
	fd, err := openBeneath(dirfd, name)
	switch {
	case errors.Is(err, unix.EEXIST):
		return nil, fmt.Errorf("create %s: it exists (a file or link put there by another); specprof writes only files it creates (--force replaces it)", path)
	case err != nil:
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// openBeneath creates name in dirfd, exclusively: openat2 resolving no
// link and nothing outside dirfd, or, where the kernel (before 5.6) or a
// seccomp filter lacks openat2, openat with O_NOFOLLOW, the same for a
// name of one component.
func openBeneath(dirfd int, name string) (int, error) {
	flags := unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC
	how := unix.OpenHow{Flags: uint64(flags), Mode: 0o644, Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_BENEATH}
	fd, err := unix.Openat2(dirfd, name, &how)
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		fd, err = unix.Openat(dirfd, name, flags, 0o644)
	}
	return fd, err
}

// createFile creates the file at path (--events) the same way, in its
// directory as the path names it.
func createFile(path string, force bool) (*os.File, error) {
	dir, name := filepath.Dir(path), filepath.Base(path)
	dfd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open the directory of %s: %w", path, err)
	}
	defer unix.Close(dfd)
	if !force {
		// Say what is wrong with a link rather than only that the name
		// exists.
		var st unix.Stat_t
		if unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return nil, fmt.Errorf("create %s: it is a symbolic link: specprof does not write through links", path)
		}
	}
	return createIn(dfd, path, name, force)
}

// close releases the directory; one specprof created and never wrote to is
// removed (only if still empty).
func (d *outDir) close() {
	if d.created && !d.wrote && d.parent >= 0 {
		_ = unix.Unlinkat(d.parent, d.name, unix.AT_REMOVEDIR)
	}
	if d.fd >= 0 {
		unix.Close(d.fd)
		d.fd = -1
	}
	if d.parent >= 0 {
		unix.Close(d.parent)
		d.parent = -1
	}
}
