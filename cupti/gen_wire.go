//go:build ignore

// gen_wire regenerates wire_linux_amd64.go from wire.h: `go tool cgo -godefs wire_defs.go`, with
// the doc comments of wire_defs.go put back (cgo drops them) and gofmt applied. Run by
// `go generate` (see doc.go); the output depends only on wire.h and wire_defs.go.
package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"strings"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "gen_wire:", err)
		os.Exit(1)
	}
}

func run() error {
	tmp, err := os.MkdirTemp("", "specprof-godefs-")
	if err != nil {
		return fmt.Errorf("creating a temporary directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	cmd := exec.Command("go", "tool", "cgo", "-objdir", tmp, "-godefs", "wire_defs.go")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("running cgo -godefs: %w", err)
	}
	// cgo names its -objdir in the header comment; keep the output independent of it.
	out = bytes.Replace(out, []byte("-objdir "+tmp+" "), nil, 1)
	docs, err := readDocs("wire_defs.go")
	if err != nil {
		return err
	}
	var b bytes.Buffer
	inConst := false
	for _, line := range strings.SplitAfter(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 2 && f[0] == "type":
			b.WriteString(docs[f[1]])
		case len(f) == 2 && f[0] == "const" && f[1] == "(":
			inConst = true
			b.WriteString(line)
			continue
		case inConst && len(f) >= 1 && f[0] != ")":
			b.WriteString(docs["const "+f[0]])
		}
		if len(f) == 1 && f[0] == ")" {
			inConst = false
		}
		b.WriteString(line)
	}
	src, err := format.Source(b.Bytes())
	if err != nil {
		return fmt.Errorf("formatting the generated code: %w", err)
	}
	// Const groups: the group's doc goes before "const (", keyed by its first name.
	src = placeGroupDocs(src, docs)
	src, err = format.Source(src)
	if err != nil {
		return fmt.Errorf("formatting the generated code: %w", err)
	}
	return os.WriteFile("wire_linux_amd64.go", src, 0o644)
}

// readDocs returns the doc comments of wire_defs.go: "Name" for types, "const Name" for a
// commented constant and "group Name" for a const group whose first constant is Name.
func readDocs(path string) (map[string]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", path, err)
	}
	docs := map[string]string{}
	text := func(g *ast.CommentGroup) string {
		if g == nil {
			return ""
		}
		var s strings.Builder
		for _, c := range g.List {
			s.WriteString(c.Text)
			s.WriteString("\n")
		}
		return s.String()
	}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok {
			continue
		}
		for i, spec := range gd.Specs {
			switch s := spec.(type) {
			case *ast.TypeSpec:
				docs[s.Name.Name] = text(gd.Doc)
			case *ast.ValueSpec:
				if i == 0 {
					docs["group "+s.Names[0].Name] = text(gd.Doc)
				}
				docs["const "+s.Names[0].Name] = text(s.Doc)
			}
		}
	}
	return docs, nil
}

func placeGroupDocs(src []byte, docs map[string]string) []byte {
	lines := strings.SplitAfter(string(src), "\n")
	var b strings.Builder
	for i, line := range lines {
		if strings.TrimSpace(line) == "const (" {
			for j := i + 1; j < len(lines); j++ {
				f := strings.Fields(lines[j])
				if len(f) == 0 || strings.HasPrefix(f[0], "//") {
					continue
				}
				b.WriteString(docs["group "+f[0]])
				break
			}
		}
		b.WriteString(line)
	}
	return []byte(b.String())
}
