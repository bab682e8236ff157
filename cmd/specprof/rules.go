package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/specprof/specprof/agent/calltree"
	"github.com/specprof/specprof/agent/phase"
)

func newRulesCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "rules",
		Short: "Work with phase rules files",
		Args:  cobra.NoArgs,
	}
	c.AddCommand(newRulesSuggestCmd())
	return c
}

func newRulesSuggestCmd() *cobra.Command {
	var o calltree.Options
	c := &cobra.Command{
		Use:   "suggest SESSION_DIR",
		Short: "Write a starting rules file (YAML, to stdout) from a session's unattributed launches",
		Long: `Write a starting rules file (YAML, to stdout) from the call tree of the launches a session's
phase rules left in phase other or outside cycles (calltree.json in its output directory,
recorded by run and attach unless --calltree=false).

The cycle is the step function: the function whose callees take turns issuing GPU work
once per step. Each callee that issued GPU work becomes a phase named after it, and the
step function's own launches one more. Rules match co_qualname and the file on Python
3.11+ (rules) and co_name and the file on 3.10 (py310_rules). Check the result against
the code, then run again with --rules FILE.

SESSION_DIR may also be the path of a calltree.json.`,
		Example: "  specprof rules suggest specprof-out/20260101-120000 > my-rules.yaml\n  specprof run --rules my-rules.yaml -- python serve.py",
		Args:    cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return suggestRules(c, args[0], o)
		},
	}
	c.Flags().IntVar(&o.PID, "pid", 0, "use only the call tree of this process (default: every process of the session, merged)")
	c.Flags().IntVar(&o.MaxChildren, "max-children", calltree.DefaultMaxChildren, "make at most this many phases from the step function's callees with the most GPU time (the rest count as the step function's own)")
	return c
}

func suggestRules(c *cobra.Command, arg string, o calltree.Options) error {
	if o.MaxChildren < 1 {
		return fmt.Errorf("--max-children %d: must be 1 or more", o.MaxChildren)
	}
	path := arg
	if st, err := os.Stat(arg); err == nil && st.IsDir() {
		path = filepath.Join(arg, calltree.FileName)
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) && path != arg {
		return fmt.Errorf("no %s in %s: the session recorded no unattributed launch with its Python stack (every launch was attributed, it made none, or it ran with --calltree=false)", calltree.FileName, arg)
	}
	if err != nil {
		return fmt.Errorf("read the call tree: %w", err)
	}
	defer f.Close()
	ct, err := calltree.Read(f)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	o.Source = path
	out, err := calltree.Suggest(ct, o)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	// What is printed must load as it is.
	if _, err := phase.LoadRules(out, "suggested.yaml"); err != nil {
		return fmt.Errorf("the suggested rules do not load (a specprof bug; please report it with %s): %w", path, err)
	}
	_, err = c.OutOrStdout().Write(out)
	return err
}
