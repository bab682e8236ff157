package cupti

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// TestWireLayoutMatchesC compiles a C program against wire.h and checks that every field of the
// generated Go mirror has the C offset and every struct the C size: the generated file is in
// sync with wire.h (make check-generate also diffs it).
func TestWireLayoutMatchesC(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not found")
	}
	types := map[string]any{
		"spw_header": Header{}, "spw_hello": Hello{}, "spw_kernel": Kernel{}, "spw_memcpy": Memcpy{},
		"spw_memset": Memset{}, "spw_api": API{}, "spw_sync": Sync{}, "spw_graph_node": GraphNode{},
		"spw_name": nameHeader{}, "spw_overhead": Overhead{}, "spw_stats": LibStats{},
	}
	var src strings.Builder
	src.WriteString("#include <stdio.h>\n#include <stddef.h>\n#include \"wire.h\"\nint main(void) {\n")
	want := map[string]uintptr{}
	for cname, v := range types {
		rt := reflect.TypeOf(v)
		fmt.Fprintf(&src, "printf(\"%s %%zu\\n\", sizeof(struct %s));\n", cname, cname)
		want[cname] = rt.Size()
		for i := 0; i < rt.NumField(); i++ {
			f := rt.Field(i)
			c := []rune(f.Name)
			c[0] = unicode.ToLower(c[0])
			key := cname + "." + string(c)
			fmt.Fprintf(&src, "printf(\"%s %%zu\\n\", offsetof(struct %s, %s));\n", key, cname, string(c))
			want[key] = f.Offset
		}
	}
	src.WriteString("return 0;\n}\n")
	dir := t.TempDir()
	cfile := filepath.Join(dir, "layout.c")
	if err := os.WriteFile(cfile, []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	bin := filepath.Join(dir, "layout")
	if out, err := exec.Command("gcc", "-I", wd, "-o", bin, cfile).CombinedOutput(); err != nil {
		t.Fatalf("compiling the layout probe: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatalf("running the layout probe: %v", err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	seen := 0
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), " ")
		n, _ := strconv.ParseUint(v, 10, 64)
		if uintptr(n) != want[k] {
			t.Errorf("%s: C says %d, Go says %d", k, n, want[k])
		}
		seen++
	}
	if seen != len(want) {
		t.Errorf("checked %d of %d layouts", seen, len(want))
	}
}
