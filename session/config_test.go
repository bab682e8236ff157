package session

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*Config)
		want string // "" valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"unknown mode", func(c *Config) { c.Mode = "fast" }, `--mode "fast"`},
		{"mode with developer knob", func(c *Config) { c.Mode = ModeFull; c.Dev.Duty = "100ms/1s" }, "--mode full with the developer"},
		{"cpu with window", func(c *Config) { c.Mode = ModeCPU; c.Window = "100ms/1s" }, "--mode cpu records no GPU work"},
		{"sampled with windows", func(c *Config) { c.Mode = ModeSampled; c.Windows = 2 }, "--windows caps them"},
		{"graph records with windows", func(c *Config) { c.Mode = ModeSnapshot; c.GPURecords = "graph" }, "--gpu-records graph with --mode snapshot"},
		{"bad window", func(c *Config) { c.Window = "1s/100ms" }, "--window"},
		{"rules and preset", func(c *Config) { c.Rules = "x.yaml"; c.Preset = "hf-assisted" }, "a rules file replaces the preset"},
		{"overhead", func(c *Config) { c.MaxOverhead = 2 }, "--max-overhead 2"},
		{"cpu hz", func(c *Config) { c.CPUHz = 100000 }, "--cpu-hz 100000"},
		{"detach without windows", func(c *Config) { c.Dev.CUPTI = "on"; c.Dev.Detach = true }, "--cupti-detach"},
		{"probe duty with GPU records", func(c *Config) { c.Dev.CUPTI = "on"; c.Dev.ProbeDuty = "250ms/10s" }, "--probe-duty with GPU records"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Defaults()
			tc.set(&c)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("rejected: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestPlan(t *testing.T) {
	plan := func(set func(*Config)) Plan {
		c := Defaults()
		set(&c)
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		return c.Plan()
	}
	if p := plan(func(*Config) {}); p.Mode != ModeAuto || !p.AutoProbes || !p.Detach || p.Windows != 3 || p.DutyStart != "cycles" || p.DutyOn != 500*time.Millisecond {
		t.Errorf("auto: %+v", p)
	}
	if p := plan(func(c *Config) { c.Mode = ModeCPU }); p.CUPTI != "off" || p.AutoProbes || p.DutyOn != 0 {
		t.Errorf("cpu: %+v", p)
	}
	if p := plan(func(c *Config) { c.Mode = ModeSampled; c.Window = "50ms/1s" }); p.DutyOn != 50*time.Millisecond || p.Windows != 0 || p.Detach {
		t.Errorf("sampled: %+v", p)
	}
	if p := plan(func(c *Config) { c.Dev.CUPTI = "on" }); p.Mode != ModeCustom || p.CUPTI != "on" || p.AutoProbes {
		t.Errorf("custom: %+v", p)
	}
}

func TestConfigSources(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.yaml")
	if err := os.WriteFile(path, []byte("mode: snapshot\nwindows: 5\ndev:\n  gate_timeout: 3s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := Defaults()
	if err := c.LoadFile(path); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"SPECPROF_GATE_TIMEOUT": "4s", "SPECPROF_QUIET_FLUSH": "off"}
	if err := c.FromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	if c.Mode != ModeSnapshot || c.Windows != 5 || c.Dev.GateTimeout != 4*time.Second || !c.Dev.NoQuietFlush {
		t.Errorf("file then environment: %+v", c)
	}
	if err := os.WriteFile(path, []byte("mdoe: cpu\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.LoadFile(path); err == nil || !strings.Contains(err.Error(), "mdoe") {
		t.Errorf("unknown key: %v", err)
	}
	bad := func(k string) (string, bool) { return "soon", k == "SPECPROF_GATE_TIMEOUT" }
	if err := c.FromEnv(bad); err == nil || !strings.Contains(err.Error(), "SPECPROF_GATE_TIMEOUT") {
		t.Errorf("bad duration: %v", err)
	}
}
