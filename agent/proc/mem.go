package proc

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// vmReadvUnavailable is set once process_vm_readv has failed with ENOSYS
// (old kernels, some seccomp profiles), so later reads go straight to
// /proc/PID/mem instead of paying a failing syscall each time.
var vmReadvUnavailable atomic.Bool

// ReadMem fills buf with the target's memory at addr. It reads exactly
// len(buf) bytes or fails; a short read (the range runs into an unmapped
// page) is an error.
//
// It uses process_vm_readv, one syscall without opening a file, and falls
// back to /proc/PID/mem where that syscall is unavailable or refused.
// Both need ptrace access to the target (same uid and a permissive
// yama.ptrace_scope, or CAP_SYS_PTRACE). The read is not atomic with
// respect to the running target: callers validate what they read.
func ReadMem(pid int, addr uint64, buf []byte) error {
	if len(buf) == 0 {
		return nil
	}
	if !vmReadvUnavailable.Load() {
		err := readMemVM(pid, addr, buf)
		if err == nil {
			return nil
		}
		switch {
		case errors.Is(err, unix.ENOSYS):
			vmReadvUnavailable.Store(true)
		case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
			// Seccomp or LSM may block the syscall but allow the file.
		default:
			return fmt.Errorf("read memory of pid %d at 0x%x (%d bytes): %w", pid, addr, len(buf), err)
		}
	}
	if err := readMemFile(pid, addr, buf); err != nil {
		return fmt.Errorf("read memory of pid %d at 0x%x (%d bytes): %w", pid, addr, len(buf), err)
	}
	return nil
}

// Gone reports whether err, from ReadMem, means that the process no longer
// exists (process_vm_readv's ESRCH, or /proc/PID gone): it exited, and what
// was not read before is lost for a known reason.
func Gone(err error) bool {
	return errors.Is(err, unix.ESRCH) || errors.Is(err, fs.ErrNotExist)
}

func readMemVM(pid int, addr uint64, buf []byte) error {
	local := []unix.Iovec{{Base: unsafe.SliceData(buf)}}
	local[0].SetLen(len(buf))
	remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(buf)}}
	n, err := unix.ProcessVMReadv(pid, local, remote, 0)
	if err != nil {
		return err
	}
	if n != len(buf) {
		return fmt.Errorf("short read: %d of %d bytes: %w", n, len(buf), io.ErrUnexpectedEOF)
	}
	return nil
}

func readMemFile(pid int, addr uint64, buf []byte) error {
	f, err := os.Open(procPath(pid, "mem"))
	if err != nil {
		return err
	}
	defer f.Close()
	// Addresses above 1<<63 do not fit ReadAt's int64 offset; no user-space
	// mapping lives there on x86-64 or arm64.
	if addr > 1<<63-1 {
		return fmt.Errorf("address 0x%x out of range: %w", addr, unix.EFAULT)
	}
	n, err := f.ReadAt(buf, int64(addr))
	if n == len(buf) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("short read: %d of %d bytes: %w", n, len(buf), err)
}
