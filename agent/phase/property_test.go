package phase

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// framePool is every frame of the table stacks (of all presets, so each
// preset also sees the others' frames as noise) plus decoys: the same
// qualnames in other files, the same names in other classes, and plain
// noise.
func framePool() []Frame {
	var pool []Frame
	for _, cases := range [][]stackCase{sglangCases, vllmCases, hfCases} {
		for _, c := range cases {
			pool = append(pool, c.stack...)
		}
	}
	n := len(pool)
	for i := 0; i < n; i++ {
		f := pool[i]
		moved := f
		moved.Filename = "/srv/app/" + f.Name + ".py"
		renamed := f
		renamed.Qualname = "Other" + f.Qualname
		pool = append(pool, moved, renamed)
	}
	for i := range 20 {
		pool = append(pool,
			sg(fmt.Sprintf("Helper%d.run", i), "utils.py"),
			user(fmt.Sprintf("f%d", i), "main.py"),
			torch(fmt.Sprintf("Tensor.op%d", i), "_tensor.py"))
	}
	return pool
}

// The contract of Classify: walking innermost-out over per-frame classes
// gives exactly Resolve, for every stack.
func TestClassifyWalkEqualsResolve(t *testing.T) {
	pool := framePool()
	for _, preset := range Presets() {
		p, err := LoadPreset(preset)
		if err != nil {
			t.Fatal(err)
		}
		for _, py310 := range []bool{false, true} {
			m, err := p.Compile(py310)
			if err != nil {
				t.Fatal(err)
			}
			frames := pool
			if py310 {
				frames = as310(pool)
			}
			// Classes are cached per frame, as the BPF side caches them per
			// code object.
			classes := make([]Class, len(frames))
			var hot []int // frames that matter, drawn more often
			for i, f := range frames {
				classes[i] = m.Classify(f)
				if c := classes[i]; c.Phase != 0 || c.Marker || c.Cycle {
					hot = append(hot, i)
				}
			}
			rng := rand.New(rand.NewPCG(1, uint64(len(preset))))
			altUsed := 0
			for iter := range 20000 {
				idx := make([]int, rng.IntN(25))
				stack := make([]Frame, len(idx))
				for i := range idx {
					if rng.IntN(3) == 0 {
						idx[i] = hot[rng.IntN(len(hot))]
					} else {
						idx[i] = rng.IntN(len(frames))
					}
					stack[i] = frames[idx[i]]
				}
				want := m.Resolve(stack)
				got, alt := walk(idx, classes)
				if alt {
					altUsed++
				}
				if got != want {
					t.Fatalf("%s py310=%v stack %d: Classify walk %+v, Resolve %+v\nstack: %+v", preset, py310, iter, got, want, stack)
				}
			}
			if m.marker != nil && altUsed == 0 {
				t.Errorf("%s py310=%v: no stack took AltPhase; the test does not exercise requires_below", preset, py310)
			}
		}
	}
}

// walk is the BPF fast path over cached classes (idx indexes classes,
// innermost first); it also finds the cycle frame as a full walk would.
func walk(idx []int, classes []Class) (r Result, alt bool) {
	r = Result{Frame: -1, CycleFrame: -1}
	marker := false
	for i, k := range idx {
		c := classes[k]
		if c.Cycle && r.CycleFrame < 0 {
			r.CycleFrame = i
		}
		if c.Phase != 0 && r.Frame < 0 {
			r.Phase, r.Frame = c.Phase, i
			if marker && c.AltPhase != 0 {
				r.Phase, alt = c.AltPhase, true
			}
		}
		marker = marker || c.Marker
	}
	return r, alt
}
