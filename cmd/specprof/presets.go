package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/specprof/specprof/agent/phase"
)

func newPresetsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "presets",
		Short: "List the built-in phase presets and their phases",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			for _, name := range phase.Presets() {
				p, err := phase.LoadPreset(name)
				if err != nil {
					return err
				}
				m, err := p.Compile(false)
				if err != nil {
					return err
				}
				fmt.Printf("%-14s %v\n", name, m.Phases())
			}
			return nil
		},
	}
}
