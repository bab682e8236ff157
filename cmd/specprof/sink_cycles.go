package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	"github.com/specprof/specprof/model"

	"github.com/spf13/pflag"
)

// The per-cycle timeline as JSON lines (cycles.jsonl in the output
// directory): one agent.CycleTrace per line, for scripts and for checking
// what the other exporters are fed.

var cyclesFlags struct {
	on      bool
	kernels bool
}

func init() {
	registerSink(sinkKind{
		name: "cycles",
		flags: func(fl *pflag.FlagSet) {
			fl.BoolVar(&cyclesFlags.on, "cycles-jsonl", false, "write every cycle's timeline (phases, collectives, syncs) to cycles.jsonl in the output directory")
			fl.BoolVar(&cyclesFlags.kernels, "cycles-kernels", false, "with --cycles-jsonl: include every GPU kernel and copy")
		},
		make: func(s *runSession) (sink, error) {
			if !cyclesFlags.on {
				return nil, nil
			}
			f, err := s.dir.create("cycles.jsonl")
			if err != nil {
				return nil, err
			}
			if cyclesFlags.kernels {
				s.detail = true
			}
			return &cyclesSink{f: f, w: bufio.NewWriterSize(f, 1<<20), path: f.Name()}, nil
		},
	})
}

type cyclesSink struct {
	f    *os.File
	w    *bufio.Writer
	path string
	err  error
	n    int
}

func (c *cyclesSink) cycle(t *model.CycleTrace) {
	if c.err != nil {
		return
	}
	b, err := json.Marshal(t)
	if err == nil {
		b = append(b, '\n')
		_, err = c.w.Write(b)
	}
	if err != nil {
		c.err = fmt.Errorf("write %s: %w", c.path, err)
		return
	}
	c.n++
}

func (c *cyclesSink) sample(*model.CPUSample) {}

func (c *cyclesSink) finish(*model.Report, *outDir) ([]string, error) {
	if err := c.w.Flush(); err != nil && c.err == nil {
		c.err = fmt.Errorf("write %s: %w", c.path, err)
	}
	if err := c.f.Close(); err != nil && c.err == nil {
		c.err = fmt.Errorf("close %s: %w", c.path, err)
	}
	return []string{c.path}, c.err
}
