package summary

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"unicode/utf8"
)

// DefaultWidth is the width the terminal output is fitted to when the
// terminal's own is not known (output to a file or a pipe).
const DefaultWidth = 120

// Layout says how wide the terminal output may be.
type Layout struct {
	// Width is the column count lines are fitted to; 0 means DefaultWidth.
	Width int
	// Wide shows every column of the phase tables and leaves long lines
	// as they are.
	Wide bool
}

func (l Layout) width() int {
	if l.Width <= 0 {
		return DefaultWidth
	}
	return l.Width
}

// column is one column of a phase table; tables drop the columns of
// lowest rank (highest number) first until they fit.
type column struct {
	head string
	rank int
}

// table is a right-aligned table whose optional columns go when it is too
// wide.
type table struct {
	cols []column
	rows [][]string
}

func (t *table) add(row ...string) { t.rows = append(t.rows, row) }

// render writes the table with as many columns as fit width (all with
// wide) and says how many it left out.
func (t *table) render(w io.Writer, lay Layout) error {
	keep := make([]bool, len(t.cols))
	for i := range keep {
		keep[i] = true
	}
	hidden := 0
	for {
		b, err := t.format(keep)
		if err != nil {
			return err
		}
		if lay.Wide || maxLine(b) <= lay.width() {
			if _, err := w.Write(b); err != nil {
				return err
			}
			if hidden > 0 {
				_, err = fmt.Fprintf(w, "  (%d more columns with --wide)\n", hidden)
			}
			return err
		}
		drop := -1
		for i, c := range t.cols {
			if keep[i] && c.rank > 0 && (drop < 0 || c.rank > t.cols[drop].rank) {
				drop = i
			}
		}
		if drop < 0 { // only the columns that always stay are left
			_, err := w.Write(b)
			return err
		}
		keep[drop] = false
		hidden++
	}
}

func (t *table) format(keep []bool) ([]byte, error) {
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	line := func(cells []string) {
		for i, c := range cells {
			if keep[i] {
				fmt.Fprintf(tw, "%s\t", c)
			}
		}
		fmt.Fprintln(tw)
	}
	heads := make([]string, len(t.cols))
	for i, c := range t.cols {
		heads[i] = c.head
	}
	line(heads)
	for _, r := range t.rows {
		line(r)
	}
	err := tw.Flush()
	return b.Bytes(), err
}

func maxLine(b []byte) int {
	n := 0
	for _, l := range bytes.Split(b, []byte("\n")) {
		n = max(n, utf8.RuneCount(bytes.TrimRight(l, " ")))
	}
	return n
}

// wrapped writes text with every line longer than the layout's width
// broken at spaces, continuation lines indented four more than the line.
func wrapped(w io.Writer, lay Layout, text []byte) error {
	if lay.Wide {
		_, err := w.Write(text)
		return err
	}
	width := lay.width()
	bw := bufio.NewWriter(w)
	for i, line := range strings.Split(string(text), "\n") {
		if i > 0 {
			bw.WriteByte('\n')
		}
		indent := len(line) - len(strings.TrimLeft(line, " "))
		prefix := ""
		for utf8.RuneCountInString(line) > width {
			cut := breakAt(line, width, len(prefix)+indent)
			if cut <= 0 {
				break
			}
			bw.WriteString(line[:cut])
			bw.WriteByte('\n')
			prefix = strings.Repeat(" ", indent+4)
			line = prefix + strings.TrimLeft(line[cut:], " ")
		}
		bw.WriteString(line)
	}
	return bw.Flush()
}

// breakAt returns the byte offset of the last space at or before width
// runes, past the line's indentation; 0 when there is none.
func breakAt(line string, width, from int) int {
	cut, runes := 0, 0
	for i, r := range line {
		if runes > width {
			break
		}
		if r == ' ' && i > from {
			cut = i
		}
		runes++
	}
	return cut
}
