package main

import (
	"fmt"
	"os"
	"time"
)

// devKnobs are the developer-only settings: read from the environment here
// and nowhere else, for tests and diagnostics, not for users.
type devKnobs struct {
	// gateTimeout (SPECPROF_GATE_TIMEOUT): how long the gate watchdog lets
	// a process stay stopped at a library open while specprof lives.
	gateTimeout time.Duration
	// gateHold (SPECPROF_TEST_GATE_HOLD): the agent holds every gated
	// process this much longer before resuming it — the window in which
	// the fault-injection tests kill or stop specprof.
	gateHold time.Duration
}

func readDevKnobs() (devKnobs, error) {
	k := devKnobs{gateTimeout: 2 * time.Second}
	for _, v := range []struct {
		name string
		dst  *time.Duration
	}{{"SPECPROF_GATE_TIMEOUT", &k.gateTimeout}, {"SPECPROF_TEST_GATE_HOLD", &k.gateHold}} {
		s := os.Getenv(v.name)
		if s == "" {
			continue
		}
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 || v.dst == &k.gateTimeout && d == 0 {
			return k, fmt.Errorf("%s=%q: want a positive duration such as 2s", v.name, s)
		}
		*v.dst = d
	}
	return k, nil
}
