package calltree

import (
	"errors"
	"strings"
	"testing"

	"github.com/specprof/specprof/agent/phase"
)

func node(fn, file string, line int, launches, self, gpu, switches, seen int64, kids ...*Node) *Node {
	name := fn
	if i := strings.LastIndexByte(fn, '.'); i >= 0 {
		name = fn[i+1:]
	}
	return &Node{Func: fn, Name: name, File: file, FirstLine: line, Launches: launches, Self: self, GPUNs: gpu, Switches: switches,
		FirstSeen: seen, Children: kids}
}

// A server loop: main → Engine.run → Engine.step (all its work in one
// callee, and a small kernel of its own) → Worker.execute, whose callees
// take turns; a model forward repeats its layers below it, and a launch
// helper runs below every callee.
func serverTree(py string) *File {
	helper := func(n, gpu int64) *Node { return node("Gpu.launch", "/x/lib/gpu.py", 5, n, n, gpu, 0, 99) }
	layer := node("Layer.forward", "/x/srv/model.py", 30, 80, 0, 80_000, 79, 7,
		node("Attn.forward", "/x/srv/model.py", 40, 40, 0, 40_000, 0, 8, helper(40, 40_000)),
		node("Mlp.forward", "/x/srv/model.py", 50, 40, 0, 40_000, 0, 9, helper(40, 40_000)))
	exec := node("Worker.execute", "/x/srv/worker.py", 10, 120, 0, 121_000, 100, 3,
		node("Drafter.propose", "/x/srv/spec/draft.py", 12, 30, 0, 30_000, 10, 4, helper(30, 30_000)),
		node("Verifier.verify", "/x/srv/spec/verify.py", 20, 80, 0, 80_000, 0, 6, layer),
		node("accept", "/x/srv/spec/verify.py", 60, 5, 0, 1_000, 0, 10, helper(5, 1_000)),
		helper(5, 10_000))
	step := node("Engine.step", "/x/srv/engine.py", 8, 125, 5, 126_000, 200, 2, exec)
	step.GPUNs += 0
	run := node("Engine.run", "/x/srv/engine.py", 4, 125, 0, 126_000, 0, 1, step)
	initw := node("Engine.__init__", "/x/srv/engine.py", 2, 10, 0, 500, 0, 0, helper(10, 500))
	main := node("main", "/x/srv/cli.py", 1, 135, 0, 126_500, 1, 0, initw, run)
	return &File{Version: FormatVersion, Preset: "sglang-eagle", Processes: []*Process{{PID: 7, Python: py, Root: &Node{Launches: 135, GPUNs: 126_500, Children: []*Node{main}}}}}
}

func TestSuggest(t *testing.T) {
	out, err := Suggest(serverTree("3.12.1"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	for _, want := range []string{
		`qualname: '^Worker\.execute$'`, "file: 'x/srv/worker\\.py$'", "start_phase: 'drafter.propose'",
		"- 'drafter.propose'\n  - 'verifier.verify'\n  - 'accept'\n  - 'worker.execute'\n",
		"py310_rules:", "name: '^verify$'", "through Gpu.launch",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("suggestion lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "phase: 'gpu.launch'") || strings.Contains(s, "layer.forward") {
		t.Errorf("a helper or a layer became a phase:\n%s", s)
	}
	p, err := phase.LoadRules(out, "suggested.yaml")
	if err != nil {
		t.Fatalf("the suggestion does not load: %v\n%s", err, s)
	}
	for _, py310 := range []bool{false, true} {
		m, err := p.Compile(py310)
		if err != nil {
			t.Fatal(err)
		}
		// A launch from a layer below verify: verify; one of Worker.execute's own: its phase.
		stack := []phase.Frame{
			{Qualname: "Gpu.launch", Name: "launch", Filename: "/x/lib/gpu.py", FirstLine: 5},
			{Qualname: "Attn.forward", Name: "forward", Filename: "/x/srv/model.py", FirstLine: 40},
			{Qualname: "Layer.forward", Name: "forward", Filename: "/x/srv/model.py", FirstLine: 30},
			{Qualname: "Verifier.verify", Name: "verify", Filename: "/srv/site-packages/x/srv/spec/verify.py", FirstLine: 20},
			{Qualname: "Worker.execute", Name: "execute", Filename: "/srv/site-packages/x/srv/worker.py", FirstLine: 10},
		}
		if py310 {
			for i := range stack {
				stack[i].Qualname = stack[i].Name
			}
		}
		if got := m.PhaseName(m.Resolve(stack).Phase); got != "verifier.verify" {
			t.Errorf("py310 %v: verify's launch in %q", py310, got)
		}
		if got := m.PhaseName(m.Resolve([]phase.Frame{stack[0], stack[4]}).Phase); got != "worker.execute" {
			t.Errorf("py310 %v: the step's own launch in %q", py310, got)
		}
	}

	// Recorded on 3.10: co_name and file only.
	f := serverTree("3.10.13")
	var strip func(n *Node)
	strip = func(n *Node) {
		n.Func = n.Name
		for _, c := range n.Children {
			strip(c)
		}
	}
	strip(f.Processes[0].Root)
	out, err = Suggest(f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s := string(out); strings.Contains(s, "qualname") || strings.Contains(s, "py310_rules") || !strings.Contains(s, "name: '^execute$'") {
		t.Errorf("3.10 suggestion:\n%s", s)
	}
	if _, err := phase.LoadRules(out, "suggested.yaml"); err != nil {
		t.Errorf("3.10 suggestion does not load: %v", err)
	}
}

func TestSuggestErrors(t *testing.T) {
	f := serverTree("3.12.1")
	if _, err := Suggest(f, Options{PID: 8}); err == nil || !strings.Contains(err.Error(), "no call tree of pid 8") {
		t.Errorf("wrong pid: %v", err)
	}
	// Nothing repeats: the step's callees never took turns.
	var zero func(n *Node)
	zero = func(n *Node) {
		n.Switches = 0
		for _, c := range n.Children {
			zero(c)
		}
	}
	zero(f.Processes[0].Root)
	if _, err := Suggest(f, Options{}); !errors.Is(err, ErrNoStep) {
		t.Errorf("no repetition: %v", err)
	}
	if _, err := Suggest(&File{Version: FormatVersion}, Options{}); !errors.Is(err, ErrNoStep) {
		t.Errorf("empty: %v", err)
	}
	if _, err := Read(strings.NewReader(`{"version": 9}`)); err == nil || !strings.Contains(err.Error(), "version 9") {
		t.Errorf("format version: %v", err)
	}
}

func TestPhaseName(t *testing.T) {
	for in, want := range map[[2]string]string{
		{"Drafter.propose", "propose"}:                            "drafter.propose",
		{"run_step", "run_step"}:                                  "run_step",
		{"Runner.sample.<locals>.propose_draft", "propose_draft"}: "sample.propose_draft",
		{"other", "other"}:                                        "fn_other",
		{"A.B.C.__call__", "__call__"}:                            "c.__call__",
	} {
		if got := phaseName(in[0], in[1]); got != want {
			t.Errorf("phaseName(%q) = %q, want %q", in[0], got, want)
		}
	}
}
