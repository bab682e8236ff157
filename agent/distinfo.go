package agent

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/specprof/specprof/agent/phase"
)

// The installed version of the server a preset was written for, read from
// its *.dist-info/METADATA (or a legacy *.egg-info's PKG-INFO) in the
// target's file system (/proc/PID/root). The directories looked in are
// those of the module files the agent sees in code objects' co_filename:
// the directory holding the distribution's package (…/site-packages for
// …/site-packages/sglang/srt/x.py), and every site-packages or
// dist-packages directory above a module file (editable installs keep
// their dist-info there while the code lives elsewhere).

// Version check statuses (VersionCheck.Status).
const (
	// VersionChecked: the installed version is one the rules were checked against.
	VersionChecked = "checked"
	// VersionOutside: the installed version is not among them.
	VersionOutside = "outside"
	// VersionUnknown: the installed version could not be found or read.
	VersionUnknown = "unknown"
)

// VersionCheck compares a traced process's installed server version with
// the versions the preset's rules were checked against (the preset's
// checked_against).
type VersionCheck struct {
	Distribution string   `json:"distribution"`
	Checked      []string `json:"checked_versions"`
	Status       string   `json:"status"`                      // checked, outside or unknown
	Installed    string   `json:"installed_version,omitempty"` // from METADATA's Version
	Metadata     string   `json:"metadata,omitempty"`          // the file read, as the target sees it
	// Problem says why the version is unknown, or what an outside
	// version means for the figures.
	Problem string `json:"problem,omitempty"`
}

// maxMetadataBytes bounds what is read of a METADATA file: the headers
// come first, the long description after them.
const maxMetadataBytes = 64 << 10

// maxDirsChecked bounds the directories listed per process.
const maxDirsChecked = 256

// distState is one process's search for its server's installed version.
type distState struct {
	want    string // normalized distribution name
	checked map[string]bool
	pkgSeen bool // a module file of the distribution's package was seen
	found   bool
	version string
	meta    string
	err     string // a METADATA file that could not be read
}

// noteModuleFile looks for the preset's distribution next to a module file
// of the process, until found.
func (a *Agent) noteModuleFile(p *process, file string) {
	ca := a.opts.Preset.CheckedAgainst
	if ca == nil || file == "" || file[0] != '/' {
		return
	}
	d := p.dist
	if d == nil {
		d = &distState{want: phase.NormalizeDistribution(ca.Distribution), checked: map[string]bool{}}
		p.dist = d
	}
	if d.found || len(d.checked) >= maxDirsChecked {
		return
	}
	file = filepath.Clean(file)
	for dir := filepath.Dir(file); ; dir = filepath.Dir(dir) {
		child, _, _ := strings.Cut(strings.TrimPrefix(file[len(dir):], "/"), "/")
		pkg := phase.NormalizeDistribution(child) == d.want
		site := strings.HasSuffix(dir, "/site-packages") || strings.HasSuffix(dir, "/dist-packages")
		d.pkgSeen = d.pkgSeen || pkg
		if (pkg || site) && !d.checked[dir] {
			d.checked[dir] = true
			if d.lookIn(p.pid, dir) || len(d.checked) >= maxDirsChecked {
				return
			}
		}
		if dir == "/" || dir == "." {
			return
		}
	}
}

// lookIn lists dir for the distribution's metadata and reads it.
func (d *distState) lookIn(pid int, dir string) bool {
	host := filepath.Join(fmt.Sprintf("/proc/%d/root", pid), dir)
	ents, err := os.ReadDir(host)
	if err != nil {
		return false
	}
	for _, e := range ents {
		n := e.Name()
		var meta string
		switch {
		case strings.HasSuffix(n, ".dist-info") && e.IsDir():
			meta = "METADATA"
		case strings.HasSuffix(n, ".egg-info") && e.IsDir():
			meta = "PKG-INFO"
		case strings.HasSuffix(n, ".egg-info"): // a one-file egg-info is PKG-INFO itself
		default:
			continue
		}
		// {name}-{version}.dist-info; legacy names keep their '-'s, so
		// any split may be the one (the file's Name: decides).
		base := strings.TrimSuffix(strings.TrimSuffix(n, ".dist-info"), ".egg-info")
		match := phase.NormalizeDistribution(base) == d.want
		for i := range base {
			if base[i] == '-' && phase.NormalizeDistribution(base[:i]) == d.want {
				match = true
			}
		}
		if !match {
			continue
		}
		path := filepath.Join(dir, n)
		if meta != "" {
			path = filepath.Join(path, meta)
		}
		name, version, err := readMetadata(filepath.Join(fmt.Sprintf("/proc/%d/root", pid), path))
		switch {
		case err != nil:
			d.err = fmt.Sprintf("%s: %v", path, err)
		case phase.NormalizeDistribution(name) != d.want:
			continue
		case version == "":
			d.err = path + ": no Version header"
		default:
			d.found, d.version, d.meta = true, version, path
			return true
		}
	}
	return false
}

// readMetadata reads the Name and Version headers of a core metadata file.
func readMetadata(path string) (name, version string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, maxMetadataBytes))
	sc.Buffer(make([]byte, 4096), maxMetadataBytes)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			break // the headers end; the description follows
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch strings.ToLower(k) {
		case "name":
			name = strings.TrimSpace(v)
		case "version":
			version = strings.TrimSpace(v)
		}
	}
	if err := sc.Err(); err != nil {
		return "", "", fmt.Errorf("read: %w", err)
	}
	return name, version, nil
}

// versionCheck is the process's version check, nil when the preset names
// no checked versions or the process ran no Python code the agent saw.
func (a *Agent) versionCheck(p *process) *VersionCheck {
	ca := a.opts.Preset.CheckedAgainst
	if ca == nil || p.rt == nil || p.dist == nil {
		return nil
	}
	d := p.dist
	vc := &VersionCheck{Distribution: ca.Distribution, Checked: ca.Versions, Status: VersionUnknown}
	if !d.found {
		dirs := make([]string, 0, len(d.checked))
		for dir := range d.checked {
			dirs = append(dirs, dir)
		}
		sort.Strings(dirs)
		switch {
		case d.err != "":
			vc.Problem = "installed version not read: " + d.err
		case len(dirs) == 0:
			vc.Problem = fmt.Sprintf("installed version not found: no module file of %s and no site-packages directory among the code the agent saw", ca.Distribution)
		case !d.pkgSeen:
			vc.Problem = fmt.Sprintf("installed version not found: no module file of a %s package among the code the agent saw, and no %s-*.dist-info in %s", ca.Distribution, d.want, strings.Join(firstN(dirs, 5), ", "))
		default:
			vc.Problem = fmt.Sprintf("installed version not found: no %s-*.dist-info or .egg-info with its name in %s", d.want, strings.Join(firstN(dirs, 5), ", "))
		}
		return vc
	}
	vc.Installed, vc.Metadata = d.version, d.meta
	ok, err := ca.Covers(d.version)
	switch {
	case err != nil:
		vc.Problem = fmt.Sprintf("installed version of %s (%s) cannot be compared: %v", ca.Distribution, d.meta, err)
	case ok:
		vc.Status = VersionChecked
	default:
		vc.Status = VersionOutside
		vc.Problem = fmt.Sprintf("%s %s is not among the versions the rules were checked against (%s): phases and cycles may be missed where its code differs; check the unattributed share and its frames, and `specprof rules suggest`",
			ca.Distribution, d.version, strings.Join(ca.Versions, ", "))
	}
	return vc
}

func firstN(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("%d more", len(s)-n))
	}
	return s
}
