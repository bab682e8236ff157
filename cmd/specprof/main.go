// Command specprof profiles speculative-decoding inference servers from
// outside the process: eBPF uprobes on the CUDA driver and NCCL, attributed
// to the Python phase (draft, verify, accept, ...) that issued each call.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	// The exec gate runs in the child before the target command replaces it.
	if len(os.Args) > 1 && os.Args[1] == gateArg {
		os.Exit(runGate(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == watchdogArg {
		os.Exit(runGateWatchdog(os.Args[2:]))
	}
	// The output helper passes the target's output on (tee.go).
	if len(os.Args) > 1 && os.Args[1] == teeArg {
		os.Exit(runTee())
	}
	root := &cobra.Command{
		Use:           "specprof",
		Short:         "Profile speculative decoding (draft / verify / accept) of LLM servers without touching them",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version(),
	}
	root.AddCommand(newRunCmd(), newAttachCmd(), newPresetsCmd(), newDiffCmd(), newRulesCmd())
	if err := root.Execute(); err != nil {
		var ee exitError
		if asExit(err, &ee) {
			os.Exit(ee.code)
		}
		fmt.Fprintln(os.Stderr, "specprof:", err)
		os.Exit(1)
	}
}
