package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/specprof/specprof/agent"
	"github.com/specprof/specprof/internal/testenv"
)

// TestPIDNamespace: a target in its own pid namespace, as in every docker or Kubernetes server,
// is attributed exactly as on the host, under `specprof run` (the namespace made by the traced
// command: `unshare -p -f --mount-proc`) and with `specprof attach` from the host. With
// libs=private libcuda and libnccl lie in a tmpfs mounted in the target's mount namespace only:
// their path does not exist on the host, so the agent must read them (symbols, probes) through
// /proc/PID/root. The workload's ground truth carries the ids its namespace gives (getpid,
// gettid: pid 1); they are mapped to host ids with the NSpid lines of the target's threads, read
// while it waits to start, and then every hooked call must be reported, in order, on its host
// thread, with the phase the workload recorded. Under run the CUPTI records (whose thread ids
// are the namespace's too) must join every launch: GPU time per phase equals the simulated.
func TestPIDNamespace(t *testing.T) {
	injLib, mockCupti, std, bin, root := standins(t)
	requireUnshare(t)
	workload := filepath.Join(root, "testdata/workloads/sglang_demo.py")
	const cycles = 24
	for _, py := range testenv.Interpreters(t) {
		// Two interpreters keep the time reasonable: the thread state's tid field and the
		// frame layout differ between them (native_thread_id from 3.8, _PyInterpreterFrame
		// from 3.11).
		if !strings.Contains(py.Name, "3.10") && !strings.Contains(py.Name, "3.12") {
			continue
		}
		for _, front := range []string{"run", "attach"} {
			for _, libs := range []string{"host", "private"} {
				t.Run(fmt.Sprintf("%s/%s/libs=%s", py.Name, front, libs), func(t *testing.T) {
					work := t.TempDir()
					dir := filepath.Join(work, "out")     // the session's output
					nsLib := filepath.Join(work, "nslib") // empty on the host
					if err := os.Mkdir(nsLib, 0o755); err != nil {
						t.Fatal(err)
					}
					gate := filepath.Join(work, "start")
					script := pidnsScript(py.Path, workload, std, nsLib, libs == "private",
						"--cycles", fmt.Sprint(cycles), "--mode", "graph", "--stack-depth", "10", "--extra-thread",
						"--allreduce", "--log-interval", "8", "--proctitle", "sglang::scheduler_TP0", "--kernel-us", "20",
						"--wait-start", gate)
					env := append(os.Environ(), "SPECPROF_SIM_TRUTH="+filepath.Join(work, "truth.jsonl"),
						"SPECPROF_CUPTI_LIB="+mockCupti)
					ns := []string{"unshare", "-p", "-f", "--mount-proc", "sh", "-c", script}
					if front == "run" {
						args := append([]string{"run", "--interval", "0", "-o", dir, "--cupti", "on", "--cupti-lib", injLib,
							"--events", filepath.Join(dir, "events.jsonl"), "--cycles-jsonl", "--cycles-kernels", "--"}, ns...)
						pidnsRun(t, bin, env, args, gate)
					} else {
						pidnsAttach(t, bin, env, ns, dir, gate)
					}
					if libs == "private" {
						if _, err := os.Stat(filepath.Join(nsLib, "libcuda.so.1")); !os.IsNotExist(err) {
							t.Fatalf("%s/libcuda.so.1 exists on the host (%v): the test does not test the mount namespace", nsLib, err)
						}
					}
					rep := readReport(t, dir)
					target, ids := pidnsTarget(t, &rep, work)
					// The report names the host's ids and, beside them, the namespace's.
					if target.NSPID != 1 {
						t.Errorf("pid %d: pid_in_namespace %d, want 1", target.PID, target.NSPID)
					}
					for _, th := range target.Threads {
						if th.Calls == 0 {
							continue // a thread seen only by the CPU sampler may have started after the map was made
						}
						if th.NSTID == 0 || ids["tid:"+itoa(th.NSTID)] != th.TID {
							t.Errorf("pid %d tid %d: tid_in_namespace %d; the thread's NSpid map is %v", target.PID, th.TID, th.NSTID, ids)
						}
					}
					wantLib := filepath.Join(std, "libcuda.so.1")
					if libs == "private" {
						wantLib = filepath.Join(nsLib, "libcuda.so.1")
					}
					if !contains(target.Libraries, wantLib) {
						t.Errorf("pid %d: libraries %v, want %s", target.PID, target.Libraries, wantLib)
					}
					truth := filepath.Join(work, "truth.host.jsonl")
					want := readTruth(t, truth)
					if front == "attach" {
						want = callsAfter(want, pidnsGateTime(t, work))
					}
					n := compareCalls(t, want, readEvents(t, filepath.Join(dir, "events.jsonl")))
					one := rep
					one.Processes = []*agent.ProcessReport{target}
					checkReport(t, &one, cycles)
					if front == "run" {
						checkKernels(t, truth, filepath.Join(dir, "events.jsonl"))
						checkGPUBusy(t, truth, &one, false)
						checkCycles(t, truth, filepath.Join(dir, "cycles.jsonl"), &one, cycles)
						if g := rep.GPUReceiver; g == nil || g.TidsUnmapped != 0 {
							t.Errorf("gpu_receiver %+v: want every CUPTI thread id mapped to a host id", g)
						}
					}
					t.Logf("%d calls compared", n)
				})
			}
		}
	}
}

// requireUnshare skips (fails under CI=true) when this machine cannot make pid namespaces.
func requireUnshare(t *testing.T) {
	t.Helper()
	out, err := exec.Command("unshare", "-p", "-f", "--mount-proc", "true").CombinedOutput()
	if err == nil {
		return
	}
	msg := fmt.Sprintf("`unshare -p -f --mount-proc true` failed (%v: %s): this machine cannot make a pid namespace", err, bytes.TrimSpace(out))
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + "; CI runs as root, so this is a setup error")
	}
	t.Skip(msg)
}

// pidnsScript is the shell command run in the new namespaces: with private, libcuda.so.1 and
// libnccl.so.2 are put in a tmpfs mounted on nsLib in the new mount namespace only (copied under
// other names and renamed: an open of a file named libcuda.so.1 for writing would look like a
// load to the agent), and found there first.
func pidnsScript(py, workload, std, nsLib string, private bool, args ...string) string {
	q := func(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
	var b strings.Builder
	b.WriteString("set -e; ")
	ldPath := std
	if private {
		fmt.Fprintf(&b, "mount -t tmpfs specprof-pidns-test %s; ", q(nsLib))
		for _, f := range []string{"libcuda.so.1", "libnccl.so.2"} {
			fmt.Fprintf(&b, "cp %s %s; mv %s %s; ", q(filepath.Join(std, f)), q(filepath.Join(nsLib, "part")),
				q(filepath.Join(nsLib, "part")), q(filepath.Join(nsLib, f)))
		}
		ldPath = nsLib + ":" + std
	}
	fmt.Fprintf(&b, "LD_LIBRARY_PATH=%s exec %s %s", q(ldPath), q(py), q(workload))
	for _, a := range args {
		b.WriteString(" " + q(a))
	}
	return b.String()
}

// lineWatch collects a command's output and reports the first line that contains a string.
type lineWatch struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
	end  chan struct{} // closed at the end of the output
	once sync.Once
}

func newLineWatch(want string) *lineWatch {
	return &lineWatch{want: want, seen: make(chan struct{}), end: make(chan struct{})}
}

func (w *lineWatch) consume(r io.Reader) {
	defer close(w.end)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		w.mu.Lock()
		w.buf.WriteString(sc.Text() + "\n")
		w.mu.Unlock()
		if strings.Contains(sc.Text(), w.want) {
			w.once.Do(func() { close(w.seen) })
		}
	}
}

func (w *lineWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// startWatched starts cmd with its stdout and stderr read by one lineWatch each.
func startWatched(t *testing.T, cmd *exec.Cmd, outWant, errWant string) (stdout, stderr *lineWatch, done *sync.WaitGroup) {
	t.Helper()
	op, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	ep, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, done = newLineWatch(outWant), newLineWatch(errWant), &sync.WaitGroup{}
	done.Add(2)
	go func() { defer done.Done(); stdout.consume(op) }()
	go func() { defer done.Done(); stderr.consume(ep) }()
	return stdout, stderr, done
}

// waitLine waits for w's line, failing when the output ends without it or after a minute.
func waitLine(t *testing.T, w *lineWatch, what string, others ...*lineWatch) {
	t.Helper()
	why := ""
	select {
	case <-w.seen:
		return
	case <-w.end:
		select {
		case <-w.seen:
			return
		default:
		}
		why = "the output ended without it"
	case <-time.After(time.Minute):
		why = "not within a minute"
	}
	var all strings.Builder
	for _, o := range append([]*lineWatch{w}, others...) {
		all.WriteString(o.String())
	}
	t.Fatalf("%s: %s:\n%s", what, why, all.String())
}

// pidnsRun runs specprof run with args, maps the target's ids while it waits at gate and
// starts it.
func pidnsRun(t *testing.T, bin string, env, args []string, gate string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	stdout, stderr, done := startWatched(t, cmd, "\x00", "sglang_demo: ready")
	defer cmd.Process.Kill()
	waitLine(t, stderr, "the workload's ready line", stdout)
	pidnsRelease(t, gate)
	done.Wait()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("specprof run: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
}

// pidnsAttach starts the namespaced target ns itself, attaches to it from the host once it waits
// at gate (the agent's events go to dir) and starts it once the probes are in.
func pidnsAttach(t *testing.T, bin string, env, ns []string, dir, gate string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	target := exec.CommandContext(ctx, ns[0], ns[1:]...)
	target.Env = env
	tout, terr, tdone := startWatched(t, target, "\x00", "sglang_demo: ready")
	defer target.Process.Kill()
	waitLine(t, terr, "the workload's ready line", tout)
	pid := pidnsFind(t, gate)
	att := exec.CommandContext(ctx, bin, "attach", "--pid", itoa(pid), "-q", "--interval", "0", "--cupti", "off",
		"--spec-metrics", "off", "--preset", "sglang-eagle", "-o", dir, "--events", filepath.Join(dir, "events.jsonl"))
	aout, aerr, adone := startWatched(t, att, "\x00", "specprof: attached to pid")
	defer att.Process.Kill()
	waitLine(t, aerr, "attach's attached line", aout, terr)
	pidnsRelease(t, gate)
	tdone.Wait()
	if err := target.Wait(); err != nil {
		t.Fatalf("the target: %v\n%s\n%s", err, tout.String(), terr.String())
	}
	adone.Wait()
	if err := att.Wait(); err != nil {
		t.Fatalf("specprof attach: %v\n%s\n%s", err, aout.String(), aerr.String())
	}
	if !strings.Contains(aerr.String(), "specprof: pid "+itoa(pid)+" exited") {
		t.Errorf("attach did not see pid %d exit:\n%s", pid, aerr.String())
	}
}

// pidnsFind returns the host pid of the workload waiting at gate: the one process in a pid
// namespace below this one whose environment names gate's truth file (its title replaced its
// arguments).
func pidnsFind(t *testing.T, gate string) int {
	t.Helper()
	mark := []byte("SPECPROF_SIM_TRUTH=" + filepath.Join(filepath.Dir(gate), "truth.jsonl") + "\x00")
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !bytes.Contains(env, mark) {
			continue
		}
		st, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil || !nsPidNested(string(st)) {
			continue
		}
		if found != 0 {
			t.Fatalf("two processes in a pid namespace have the workload's environment: %d and %d", found, pid)
		}
		found = pid
	}
	if found == 0 {
		t.Fatalf("no process in a pid namespace has the workload's environment (%s)", mark)
	}
	return found
}

// nsPidNested reports whether a status file's NSpid line has more than one id.
func nsPidNested(status string) bool {
	for _, l := range strings.Split(status, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == "NSpid:" {
			return len(f) > 2
		}
	}
	return false
}

// pidnsRelease maps the ids of the workload waiting at gate (every thread that makes calls
// exists by then) and starts it. The map goes to gate+".ids", the start time (CLOCK_MONOTONIC,
// the truth's and the events' clock) to gate+".t"; pidnsTarget applies the map to the truth.
func pidnsRelease(t *testing.T, gate string) {
	t.Helper()
	pid := pidnsFind(t, gate)
	ids := map[string]int{} // "pid:N" and "tid:N" (the namespace's) -> host id
	own := nsLast(t, fmt.Sprintf("/proc/%d/status", pid))
	if own[0] == own[1] {
		t.Fatalf("pid %d: NSpid %v: the workload is not in a pid namespace of its own", pid, own)
	}
	ids["pid:"+itoa(own[1])] = pid
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		th := nsLast(t, fmt.Sprintf("/proc/%d/task/%s/status", pid, e.Name()))
		ids["tid:"+itoa(th[1])] = th[0]
	}
	if len(ents) < 2 {
		t.Fatalf("pid %d has %d threads at the start; --extra-thread starts its worker before", pid, len(ents))
	}
	b, err := json.Marshal(ids)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(gate+".ids", b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(gate+".t", []byte(strconv.FormatUint(monotonicNs(t), 10)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// nsLast reads the NSpid line of a status file: the host id and the id in the process's own
// namespace.
func nsLast(t *testing.T, status string) [2]int {
	t.Helper()
	b, err := os.ReadFile(status)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "NSpid:" {
			return [2]int{atoi(f[1]), atoi(f[len(f)-1])}
		}
	}
	t.Fatalf("%s: no NSpid line", status)
	return [2]int{}
}

// pidnsTarget returns the workload's process in rep and the map of its ids pidnsRelease wrote,
// and writes truth.host.jsonl: the truth with its pid and tid fields (the namespace's ids)
// replaced by the host's.
func pidnsTarget(t *testing.T, rep *agent.Report, dir string) (*agent.ProcessReport, map[string]int) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "start.ids"))
	if err != nil {
		t.Fatal(err)
	}
	var ids map[string]int
	if err := json.Unmarshal(b, &ids); err != nil {
		t.Fatal(err)
	}
	var target *agent.ProcessReport
	for _, p := range rep.Processes {
		if p.PID == ids["pid:1"] {
			target = p
		}
	}
	if target == nil {
		t.Fatalf("the report has no process %d (the workload; pid 1 in its namespace): %d processes", ids["pid:1"], len(rep.Processes))
	}
	in, err := os.ReadFile(filepath.Join(dir, "truth.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	for i, line := range bytes.Split(bytes.TrimSpace(in), []byte("\n")) {
		var rec map[string]json.RawMessage
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatalf("truth line %d: %v", i+1, err)
		}
		for _, k := range []string{"pid", "tid"} {
			v, ok := rec[k]
			if !ok || string(v) == "0" {
				continue
			}
			host, ok := ids[k+":"+string(v)]
			if !ok {
				t.Fatalf("truth line %d: %s %s is no id the workload had at its start (map %v)", i+1, k, v, ids)
			}
			rec[k] = json.RawMessage(itoa(host))
		}
		nb, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		out.Write(append(nb, '\n'))
	}
	if err := os.WriteFile(filepath.Join(dir, "truth.host.jsonl"), out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return target, ids
}

// pidnsGateTime is when pidnsRelease started the workload.
func pidnsGateTime(t *testing.T, dir string) uint64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "start.t"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// callsAfter keeps the calls entered after ktime: those that attach, in before the workload
// started, sees.
func callsAfter(calls map[int][]call, ktime uint64) map[int][]call {
	out := map[int][]call{}
	for tid, cs := range calls {
		i := 0
		for i < len(cs) && cs[i].ktime < ktime {
			i++
		}
		if i < len(cs) {
			out[tid] = cs[i:]
		}
	}
	return out
}

// monotonicNs is CLOCK_MONOTONIC now, the clock of the truth and of the events.
func monotonicNs(t *testing.T) uint64 {
	t.Helper()
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	return uint64(ts.Nano())
}

func contains(xs []string, x string) bool {
	for _, s := range xs {
		if s == x {
			return true
		}
	}
	return false
}
