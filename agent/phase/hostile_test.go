package phase

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime/metrics"
	"strings"
	"testing"
	"time"
)

// aliasBomb is the "billion laughs": nine levels of nine aliases, 9^9
// nodes once expanded. It is a list of phases lists, which goccy/go-yaml
// expanded; merge keys make a bomb that decodes into rules.
func aliasBomb(merge bool) string {
	var b strings.Builder
	if merge {
		b.WriteString("rules:\n  - &a {phase: lol, qualname: lol}\n")
	} else {
		b.WriteString("phases:\n  - &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n")
	}
	for c := 'b'; c <= 'i'; c++ {
		if merge {
			fmt.Fprintf(&b, "  - &%c {<<: [", c)
		} else {
			fmt.Fprintf(&b, "  - &%c [", c)
		}
		for j := range 9 {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*%c", c-1)
		}
		if merge {
			b.WriteString("]}")
		} else {
			b.WriteString("]")
		}
		b.WriteString("\n")
	}
	if !merge {
		b.WriteString("rules:\n  - {phase: x, qualname: a}\n")
	}
	return b.String()
}

// hostileRules are inputs that once crashed specprof or took gigabytes,
// and the error each must give instead.
var hostileRules = []struct {
	name, body string
	want       []string
}{
	// A non-specific tag on an empty node panicked goccy/go-yaml v1.19.2.
	{"bare tag", "rules:\n  !\n", []string{"line 2", "fix the YAML"}},
	{"alias bomb of phases", aliasBomb(false), []string{"line 2, column 5: cannot construct !!seq into string", "fix the YAML"}},
	{"alias bomb of rules", aliasBomb(true), []string{"aliases expand to more than 10000 nodes at line", "remove the aliases"}},
	{"deep flow nesting", "rules: " + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + "\n",
		[]string{"nesting deeper than 16 levels at line 1", "rules files are flat lists"}},
	{"deep block nesting", "rules:\n" + strings.Repeat("- ", 100000) + "x\n",
		[]string{"nesting deeper than 16 levels at line 2", "rules files are flat lists"}},
}

// hostileHeapLimit is far above what parsing any of hostileRules needs
// once the limits hold, and far below what they took without them.
const hostileHeapLimit = 256 << 20

// Each hostile input is loaded in a child process that exits as soon as
// its heap passes hostileHeapLimit, so that a regression shows as a failed
// test rather than as a machine out of memory, and a panic fails this
// test only.
func TestRulesFileHostile(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range hostileRules {
		t.Run(c.name, func(t *testing.T) {
			path := writeRules(t, c.body)
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, exe, "-test.run=^TestHostileChild$", "-test.v")
			cmd.Env = append(os.Environ(), "SPECPROF_HOSTILE_RULES="+path)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("child: %v\n%s", err, tail(out))
			}
			got, ok := strings.CutPrefix(grepLine(string(out), "hostile error: "), "hostile error: ")
			if !ok {
				t.Fatalf("child printed no error:\n%s", tail(out))
			}
			for _, s := range c.want {
				if !strings.Contains(got, s) {
					t.Errorf("error %q lacks %q", got, s)
				}
			}
		})
	}
}

// TestHostileChild is TestRulesFileHostile's child: it loads one file and
// prints the error.
func TestHostileChild(t *testing.T) {
	path := os.Getenv("SPECPROF_HOSTILE_RULES")
	if path == "" {
		t.Skip("run by TestRulesFileHostile")
	}
	go watchHeap()
	_, err := LoadRulesFile(path)
	if err == nil {
		t.Fatal("no error")
	}
	fmt.Printf("hostile error: %s\n", strings.ReplaceAll(err.Error(), "\n", `\n`))
}

// watchHeap ends the process once the heap passes hostileHeapLimit.
func watchHeap() {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	for {
		metrics.Read(s)
		if n := s[0].Value.Uint64(); n > hostileHeapLimit {
			fmt.Printf("heap at %d MiB: over the limit\n", n>>20)
			os.Exit(3)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func grepLine(s, prefix string) string {
	for l := range strings.Lines(s) {
		if strings.HasPrefix(l, prefix) {
			return strings.TrimSuffix(l, "\n")
		}
	}
	return ""
}

func tail(b []byte) []byte {
	if len(b) > 2000 {
		return b[len(b)-2000:]
	}
	return b
}
