package proc

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// procRoot is where procfs is mounted; a variable so tests can point it at
// a fixture tree.
var procRoot = "/proc"

func procPath(pid int, elem ...string) string {
	return procRoot + "/" + strconv.Itoa(pid) + "/" + strings.Join(elem, "/")
}

// Exists reports whether a process (or thread) with this id exists and is
// visible to the agent.
func Exists(pid int) bool {
	if pid <= 0 {
		return false
	}
	_, err := os.Stat(procPath(pid))
	return err == nil
}

// Args returns the argument vector of pid. It is empty for kernel threads
// and zombies.
func Args(pid int) ([]string, error) {
	b, err := os.ReadFile(procPath(pid, "cmdline"))
	if err != nil {
		return nil, fmt.Errorf("read cmdline of pid %d: %w", pid, err)
	}
	b = bytes.TrimRight(b, "\x00")
	if len(b) == 0 {
		return nil, nil
	}
	return strings.Split(string(b), "\x00"), nil
}

// Cmdline returns the command line of pid with arguments joined by single
// spaces, the form process selectors match against (a title set with
// setproctitle, such as "sglang::scheduler_TP0", comes back unchanged).
func Cmdline(pid int) (string, error) {
	args, err := Args(pid)
	if err != nil {
		return "", err
	}
	return strings.Join(args, " "), nil
}

// Comm returns the kernel's short name of pid (at most 15 bytes; the name
// process managers such as SGLang set with setproctitle).
func Comm(pid int) (string, error) {
	b, err := os.ReadFile(procPath(pid, "comm"))
	if err != nil {
		return "", fmt.Errorf("read comm of pid %d: %w", pid, err)
	}
	return strings.TrimSuffix(string(b), "\n"), nil
}

// Exe returns the path of pid's executable in the target's mount namespace,
// without the " (deleted)" suffix the kernel adds for unlinked files, so it
// compares equal to Mapping.Path.
func Exe(pid int) (string, error) {
	p, err := os.Readlink(procPath(pid, "exe"))
	if err != nil {
		return "", fmt.Errorf("read exe of pid %d: %w", pid, err)
	}
	return strings.TrimSuffix(p, deletedSuffix), nil
}

// Threads returns the thread ids (Linux TIDs) of pid in ascending order.
// The main thread has TID == pid.
func Threads(pid int) ([]int, error) {
	ents, err := os.ReadDir(procPath(pid, "task"))
	if err != nil {
		return nil, fmt.Errorf("list threads of pid %d: %w", pid, err)
	}
	tids := make([]int, 0, len(ents))
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	slices.Sort(tids)
	return tids, nil
}

// OwnNamespaceID returns the id that thread tid of process pid has in its own pid namespace
// (what gettid() returns there; for tid == pid, what getpid() returns): the last field of NSpid
// in /proc/PID/task/TID/status. It equals tid when the process shares the agent's namespace,
// and it is tid too on kernels before 4.1, which have no NSpid line.
func OwnNamespaceID(pid, tid int) (int, error) {
	b, err := os.ReadFile(procPath(pid, "task", strconv.Itoa(tid), "status"))
	if err != nil {
		return 0, fmt.Errorf("read the pid namespaces of thread %d of pid %d: %w", tid, pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "NSpid:" {
			continue
		}
		id, err := strconv.Atoi(f[len(f)-1])
		if err != nil {
			return 0, fmt.Errorf("read the pid namespaces of thread %d of pid %d: NSpid %q: %w", tid, pid, line, err)
		}
		return id, nil
	}
	return tid, nil
}
