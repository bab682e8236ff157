package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v4"

	"github.com/specprof/specprof/bpf"
	"github.com/specprof/specprof/internal/testenv"
)

// conformance is a workload's conformance.yaml (testdata/conformance/README.md).
type conformance struct {
	Server    string `yaml:"server"`
	Version   string `yaml:"version"`
	Preset    string `yaml:"preset"`
	Proctitle string `yaml:"proctitle"`
	Cycles    int    `yaml:"cycles"`
	Upstream  []struct {
		Repo   string `yaml:"repo"`
		Path   string `yaml:"path"`
		Commit string `yaml:"commit"`
	} `yaml:"upstream"`
	Variants []struct {
		Name string   `yaml:"name"`
		Args []string `yaml:"args"`
	} `yaml:"variants"`
}

func loadConformance(t *testing.T, path string) conformance {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var c conformance
	if err := yaml.Load(b, &c, yaml.WithKnownFields()); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	switch {
	case c.Server == "" || c.Version == "" || c.Preset == "":
		t.Fatalf("%s: server, version and preset are required", path)
	case c.Cycles < 2:
		t.Fatalf("%s: cycles %d: run at least 2", path, c.Cycles)
	case len(c.Variants) == 0:
		t.Fatalf("%s: no variants", path)
	case len(c.Upstream) == 0:
		t.Fatalf("%s: upstream: name the real files the workload was written from", path)
	}
	for _, u := range c.Upstream {
		if u.Repo == "" || u.Path == "" || len(u.Commit) < 7 {
			t.Fatalf("%s: upstream entry %+v: repo, path and commit are required", path, u)
		}
	}
	return c
}

// labelled is one hooked call or sync return: its API and "phase",
// "phase@N" or "phase@TID:N" (the truth tag's form).
type labelled struct {
	api, label string
	ktime      uint64
	exit       bool
}

func (l labelled) String() string { return l.api + " in " + l.label }

// conformanceEvents reads events.jsonl into per-thread calls and sync
// returns, labelled as the truth tags are.
func conformanceEvents(t *testing.T, path string) (calls, exits map[int][]labelled) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	calls, exits = map[int][]labelled{}, map[int][]labelled{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e eventLine
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("event line %q: %v", sc.Text(), err)
		}
		label := e.Phase
		switch {
		case e.Cycle != 0 && e.CycleTID != 0:
			label = fmt.Sprintf("%s@%d:%d", e.Phase, e.CycleTID, e.Cycle)
		case e.Cycle != 0:
			label = fmt.Sprintf("%s@%d", e.Phase, e.Cycle)
		}
		l := labelled{api: e.API, label: label, ktime: e.Ktime}
		switch e.Kind {
		case "sync_exit":
			l.exit = true
			exits[e.TID] = append(exits[e.TID], l)
		case "kernel", "gpu_api":
		default:
			calls[e.TID] = append(calls[e.TID], l)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return calls, exits
}

// blocking reports whether the hooked API family times its return.
var blocking = func() map[string]bool {
	m := map[string]bool{}
	for _, h := range bpf.Hooks {
		if h.RetProg != "" {
			m[h.Name] = true
		}
	}
	return m
}()

// cycleOf returns the thread and cycle a truth tag names (tid 0: the
// caller's), and whether it names one.
func cycleOf(tag string) (tid, no int, ok bool) {
	_, ref, found := strings.Cut(tag, "@")
	if !found {
		return 0, 0, false
	}
	if a, b, two := strings.Cut(ref, ":"); two {
		tid, _ = strconv.Atoi(a)
		ref = b
	}
	no, err := strconv.Atoi(ref)
	return tid, no, err == nil
}

// TestConformance runs every workload of testdata/conformance (one per
// supported server version, written from the real upstream files) under
// `specprof run --preset P` on every interpreter and requires every hooked
// call, and every blocking call's return, reported with the phase and
// cycle the workload recorded, thread by thread in order, and the report's
// cycle counts equal to the workload's.
func TestConformance(t *testing.T) {
	_, _, std, bin, root := standins(t)
	confs, err := filepath.Glob(filepath.Join(root, "testdata/conformance/*/conformance.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(confs) == 0 {
		t.Fatal("no workloads in testdata/conformance")
	}
	for _, cpath := range confs {
		dir := filepath.Dir(cpath)
		id := filepath.Base(dir)
		c := loadConformance(t, cpath)
		pys := testenv.Interpreters(t)
		for _, py := range pys {
			for _, v := range c.Variants {
				t.Run(id+"/"+v.Name+"/"+py.Name, func(t *testing.T) {
					runConformance(t, bin, std, dir, c, py.Path, v.Args, false)
				})
			}
		}
		// In a PID namespace of its own, as in a container: the same
		// attribution, with the host's thread ids.
		for _, v := range c.Variants {
			py := pys[len(pys)/2]
			t.Run(id+"/"+v.Name+"/pidns-"+py.Name, func(t *testing.T) {
				requireUnshare(t)
				runConformance(t, bin, std, dir, c, py.Path, v.Args, true)
			})
		}
	}
}

func runConformance(t *testing.T, bin, std, wdir string, c conformance, python string, vargs []string, pidns bool) {
	out := t.TempDir()
	args := []string{"run", "-q", "--interval", "0", "-o", out, "--cupti", "off", "--preset", c.Preset,
		"--events", filepath.Join(out, "events.jsonl"), "--"}
	if pidns {
		args = append(args, "unshare", "-p", "-f", "--mount-proc")
	}
	args = append(args, python, filepath.Join(wdir, "workload.py"), "--cycles", strconv.Itoa(c.Cycles))
	if c.Proctitle != "" {
		args = append(args, "--proctitle", c.Proctitle)
	}
	args = append(args, vargs...)
	cmd := exec.Command(bin, args...)
	truthPath := filepath.Join(out, "truth.jsonl")
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+std, "SPECPROF_SIM_TRUTH="+truthPath)
	res, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("specprof run: %v\n%s", err, res)
	}
	recs, err := testenv.ReadTruth(truthPath)
	if err != nil {
		t.Fatal(err)
	}
	rep := readReport(t, out)
	// The processes that made calls: under unshare, unshare itself is
	// traced too, and makes none.
	procs := rep.Processes[:0:0]
	for _, p := range rep.Processes {
		calls := int64(0)
		for _, th := range p.Threads {
			calls += th.Calls
		}
		if calls > 0 {
			procs = append(procs, p)
		}
	}
	if pidns {
		// The workload recorded its namespace's ids: the report maps them.
		hostTID := map[int]int{}
		for _, p := range procs {
			if p.NSPID == 0 {
				t.Errorf("pid %d: no pid_in_namespace, though it ran in a PID namespace of its own", p.PID)
			}
			for _, th := range p.Threads {
				hostTID[th.NSTID] = th.TID
			}
		}
		for i := range recs {
			r := &recs[i]
			if h, ok := hostTID[int(r.Tid)]; ok {
				r.Tid = uint32(h)
			}
			if ph, ref, found := strings.Cut(r.Tag, "@"); found {
				if a, b, two := strings.Cut(ref, ":"); two {
					n, _ := strconv.Atoi(a)
					if h, ok := hostTID[n]; ok {
						r.Tag = fmt.Sprintf("%s@%d:%s", ph, h, b)
					}
				}
			}
		}
	}
	truth := map[int][]labelled{}
	truthExits := map[int][]labelled{}
	cycles := map[int]map[int]bool{} // tid → cycles the workload ran
	for _, r := range recs {
		var name string
		switch r.Kind {
		case "api":
			name = canonical[r.API]
		case "coll":
			name = canonical["nccl"+r.Op]
		}
		if name == "" {
			continue
		}
		tid := int(r.Tid)
		truth[tid] = append(truth[tid], labelled{api: name, label: r.Tag, ktime: r.Enter})
		if r.Kind == "api" && blocking[name] {
			truthExits[tid] = append(truthExits[tid], labelled{api: name, label: r.Tag, ktime: r.Exit, exit: true})
		}
		if ct, no, ok := cycleOf(r.Tag); ok {
			if ct == 0 {
				ct = tid
			}
			if cycles[ct] == nil {
				cycles[ct] = map[int]bool{}
			}
			cycles[ct][no] = true
		}
	}
	for _, m := range []map[int][]labelled{truth, truthExits} {
		for _, ls := range m {
			sort.SliceStable(ls, func(i, j int) bool { return ls[i].ktime < ls[j].ktime })
		}
	}
	calls, exits := conformanceEvents(t, filepath.Join(out, "events.jsonl"))
	n := compareLabelled(t, "call", truth, calls) + compareLabelled(t, "sync return", truthExits, exits)
	if n == 0 {
		t.Fatal("the workload made no hooked call")
	}

	if len(procs) != 1 {
		t.Fatalf("%d processes made calls, want the workload's 1", len(procs))
	}
	got := map[int]int{}
	for _, th := range procs[0].Threads {
		got[th.TID] = th.Cycles
		if th.LossCut+th.LostWhole+th.ProbeCut != 0 {
			t.Errorf("tid %d: cycles left out: %d lost records, %d lost whole, %d cut", th.TID, th.LossCut, th.LostWhole, th.ProbeCut)
		}
	}
	for tid, cs := range cycles {
		if got[tid] != len(cs) {
			t.Errorf("tid %d: %d cycles in the report, the workload ran %d", tid, got[tid], len(cs))
		}
	}
	for tid, n := range got {
		if n != 0 && cycles[tid] == nil {
			t.Errorf("tid %d: %d cycles in the report for a thread that ran none", tid, n)
		}
	}
	if l := rep.Loss; l.RingBuf+l.NoThreadState+l.ReadErrors+l.Truncated+l.SymbolErrors+l.LateWaitsTooLate != 0 {
		t.Errorf("losses: %+v", l)
	}
	t.Logf("%d calls and returns compared, %d cycles", n, len(cycles[procs[0].PID]))
}

// compareLabelled requires every thread's labelled calls in order.
func compareLabelled(t *testing.T, what string, want, got map[int][]labelled) int {
	t.Helper()
	total := 0
	for tid, w := range want {
		h := got[tid]
		if len(h) != len(w) {
			t.Errorf("tid %d: %d %ss reported, the workload made %d", tid, len(h), what, len(w))
		}
		bad := 0
		for i := 0; i < len(w) && i < len(h); i++ {
			if w[i].api != h[i].api || w[i].label != h[i].label {
				if bad < 8 {
					t.Errorf("tid %d %s %d: got %v, the workload recorded %v", tid, what, i, h[i], w[i])
				}
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("tid %d: %d of %d %ss wrong", tid, bad, len(w), what)
		}
		total += len(w)
	}
	for tid, h := range got {
		if _, ok := want[tid]; !ok {
			t.Errorf("tid %d: %d %ss reported for a thread that made none", tid, len(h), what)
		}
	}
	return total
}
