package summary

import (
	"bytes"
	"strings"
	"testing"

	"github.com/specprof/specprof/agent"
)

func TestWriteAttribution(t *testing.T) {
	fr := func(fn string, line int, n, gpu int64) *agent.FrameStats {
		return &agent.FrameStats{Frame: agent.Frame{Func: fn, File: "/srv/x.py", Line: line}, Launches: n, GPUNs: gpu}
	}
	var top []*agent.FrameStats
	for i := 0; i < 7; i++ {
		top = append(top, fr("f", 10+i, int64(70-i), int64(7e6-1e6*int64(i))))
	}
	a := &agent.Attribution{Launches: 1000, OtherLaunches: 200, OutsideLaunches: 150, UnattributedLaunches: 300, GPU: true,
		GPUNs: 100e6, OtherGPUNs: 20e6, OutsideGPUNs: 5e6, UnattributedGPUNs: 22e6, TopByLaunches: top, TopByGPU: top}
	var b bytes.Buffer
	writeAttribution(&b, a)
	writeVersion(&b, &agent.VersionCheck{Distribution: "sglang", Checked: []string{"0.4..0.5"}, Status: agent.VersionOutside, Installed: "0.6.0",
		Problem: "sglang 0.6.0 is not among the versions"})
	out := b.String()
	for _, want := range []string{
		"unattributed: 30.0 % of 1000 launches (phase other 20.0 %, outside cycles 15.0 %); 22.0 % of 100.000 ms GPU kernel time (phase other 20.0 %, outside cycles 5.0 %)",
		"      70   7.0 %  f (/srv/x.py:10)", "   7.000 ms   7.0 %  f (/srv/x.py:10)", "f (/srv/x.py:14)", "specprof rules suggest",
		"server version: sglang 0.6.0 is not among the versions",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "/srv/x.py:15)") {
		t.Errorf("more than %d frames listed:\n%s", TerminalTopFrames, out)
	}
	// Well attributed: no hint, no frames without unattributed launches.
	b.Reset()
	writeAttribution(&b, &agent.Attribution{Launches: 1000, UnattributedLaunches: 10, GPU: true, GPUNs: 1e6, UnattributedGPUNs: 1e4, TopByLaunches: top[:1]})
	if out := b.String(); strings.Contains(out, "rules suggest") || !strings.Contains(out, "unattributed: 1.0 %") {
		t.Errorf("well attributed:\n%s", out)
	}
}
