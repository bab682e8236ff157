package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/specprof/specprof/agent"
)

// jsonNames returns the JSON field names of t and of every struct it holds,
// through pointers, slices and maps.
func jsonNames(t reflect.Type, seen map[reflect.Type]bool, out map[string]string) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || seen[t] || t == reflect.TypeFor[time.Time]() {
		return
	}
	seen[t] = true
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name != "" {
			out[name] = t.Name() + "." + f.Name
		}
		jsonNames(f.Type, seen, out)
	}
}

// TestREADMEAndReferenceDocs checks that docs/reference.md names every field
// specprof writes (report.json, cycles.jsonl, the events file), and that the
// README stays short and points into no benchmark log.
func TestREADMEAndReferenceDocs(t *testing.T) {
	root := filepath.Join("..", "..")
	ref, err := os.ReadFile(filepath.Join(root, "docs", "reference.md"))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	seen := map[reflect.Type]bool{}
	for _, v := range []any{agent.Report{}, agent.CycleTrace{}, eventLine{}, kernelLine{}, apiLine{}} {
		jsonNames(reflect.TypeOf(v), seen, names)
	}
	for name, field := range names {
		if !strings.Contains(string(ref), "`"+name+"`") && !strings.Contains(string(ref), "`"+name+"[]`") {
			t.Errorf("docs/reference.md does not describe %s (JSON %q)", field, name)
		}
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(readme) > 10*1024 {
		t.Errorf("README.md is %d bytes, more than 10 KB: move detail into docs/", len(readme))
	}
	for _, doc := range []string{"README.md", "docs/design.md", "docs/reference.md"} {
		b, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, mark := range []string{"§", "docs/benchmarks/", "bench/gpu/results"} {
			if strings.Contains(string(b), mark) {
				t.Errorf("%s contains %q: link docs/overhead.md instead of the benchmark log", doc, mark)
			}
		}
	}
}
