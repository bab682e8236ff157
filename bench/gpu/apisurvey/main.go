package main

import (
	"bufio"
	"debug/elf"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"

	"github.com/specprof/specprof/agent/proc"
)

//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -D__TARGET_ARCH_x86 -I/usr/include/x86_64-linux-gnu" -target amd64 -type sym_stat survey c/survey.bpf.c

const maxSyms = 2048 // MAX_SYMS in survey.bpf.c

// DefaultMatch covers copies, sets, blocking and polling calls, and launches.
const defaultMatch = `^cu(Memcpy|Memset|Ctx\w*Synchronize|Stream(Synchronize|Query|WaitEvent|AddCallback)|Event(Synchronize|Query|Record)|LaunchKernel|LaunchHostFunc|GraphLaunch|Memcpy)`

func main() {
	match := flag.String("match", defaultMatch, "regular expression: the exported libcuda functions to probe")
	jsonOut := flag.String("json", "", "also write the counts as JSON to this file")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: apisurvey [-match REGEX] [-json FILE] -- PROGRAM ARGS...")
		os.Exit(2)
	}
	re, err := regexp.Compile(*match)
	if err != nil {
		fmt.Fprintln(os.Stderr, "apisurvey: -match:", err)
		os.Exit(2)
	}
	res, err := survey(re, flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "apisurvey:", err)
		os.Exit(1)
	}
	printTable(os.Stdout, res)
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "apisurvey: write -json:", err)
			os.Exit(1)
		}
	}
}

// Row is one symbol's counts in one section.
type Row struct {
	Symbol  string  `json:"symbol"` // aliases at the same address joined with "="
	Calls   uint64  `json:"calls"`
	Returns uint64  `json:"returns"`
	TotalUs float64 `json:"total_us"`
	MaxUs   float64 `json:"max_us"`
	Orphans uint64  `json:"orphans,omitempty"`
}

// Section is what the program did between two markers.
type Section struct {
	Name string `json:"name"`
	Rows []Row  `json:"rows"`
}

// Result is a whole survey.
type Result struct {
	Library  string    `json:"library"`
	Probed   int       `json:"probed_symbols"`
	Sections []Section `json:"sections"`
}

type target struct {
	names []string
	addr  uint64
}

// functions lists the exported functions of the ELF file at path whose
// name matches re, aliases (one address) merged.
func functions(path string, re *regexp.Regexp) ([]target, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		return nil, fmt.Errorf("read the dynamic symbols of %s: %w", path, err)
	}
	byAddr := map[uint64]*target{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Value == 0 || s.Section == elf.SHN_UNDEF || !re.MatchString(s.Name) {
			continue
		}
		name := s.Name
		if i := strings.IndexByte(name, '@'); i >= 0 {
			name = name[:i]
		}
		t := byAddr[s.Value]
		if t == nil {
			t = &target{addr: s.Value}
			byAddr[s.Value] = t
		}
		t.names = append(t.names, name)
	}
	out := make([]target, 0, len(byAddr))
	for _, t := range byAddr {
		sort.Strings(t.names)
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].names[0] < out[j].names[0] })
	return out, nil
}

func survey(re *regexp.Regexp, argv []string) (*Result, error) {
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("remove the memlock limit: %w", err)
	}
	spec, err := loadSurvey()
	if err != nil {
		return nil, fmt.Errorf("read the BPF object: %w", err)
	}
	for _, ps := range spec.Programs {
		ps.AttachType = ebpf.AttachTraceUprobeMulti // one link for every symbol, with cookies
	}
	var objs surveyObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return nil, fmt.Errorf("load the BPF programs: %w", err)
	}
	defer objs.Close()

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	res := &Result{}
	var targets []target
	var links []link.Link
	defer func() {
		for _, l := range links {
			_ = l.Close()
		}
	}()
	prev := make([]surveySymStat, maxSyms)
	section := ""
	attach := func() error {
		lib, err := driverOf(cmd.Process.Pid)
		if err != nil {
			return err
		}
		res.Library = lib
		targets, err = functions(lib, re)
		if err != nil {
			return err
		}
		if len(targets) == 0 {
			return fmt.Errorf("no exported function of %s matches %q", lib, re)
		}
		if len(targets) > maxSyms {
			return fmt.Errorf("%d functions match %q; at most %d: narrow -match", len(targets), re, maxSyms)
		}
		ex, err := link.OpenExecutable(lib)
		if err != nil {
			return fmt.Errorf("open %s: %w", lib, err)
		}
		addrs := make([]uint64, len(targets))
		cookies := make([]uint64, len(targets))
		for i, t := range targets {
			addrs[i], cookies[i] = t.addr, uint64(i)
		}
		opts := &link.UprobeMultiOptions{PID: uint32(cmd.Process.Pid), Addresses: addrs, Cookies: cookies}
		l, err := ex.UprobeMulti(nil, objs.SurveyEnter, opts)
		if err != nil {
			return fmt.Errorf("attach the entry probes: %w", err)
		}
		links = append(links, l)
		l, err = ex.UretprobeMulti(nil, objs.SurveyReturn, opts)
		if err != nil {
			return fmt.Errorf("attach the return probes: %w", err)
		}
		links = append(links, l)
		res.Probed = len(targets)
		return nil
	}
	snapshot := func() error {
		cur := make([]surveySymStat, maxSyms)
		for i := range targets {
			if err := objs.Stats.Lookup(uint32(i), &cur[i]); err != nil {
				return fmt.Errorf("read the counters: %w", err)
			}
		}
		if section != "" {
			s := Section{Name: section}
			for i, t := range targets {
				d := surveySymStat{Calls: cur[i].Calls - prev[i].Calls, Returns: cur[i].Returns - prev[i].Returns,
					Ns: cur[i].Ns - prev[i].Ns, Orphans: cur[i].Orphans - prev[i].Orphans}
				if d.Calls == 0 && d.Returns == 0 {
					continue
				}
				s.Rows = append(s.Rows, Row{Symbol: strings.Join(t.names, "="), Calls: d.Calls, Returns: d.Returns,
					TotalUs: float64(d.Ns) / 1e3, MaxUs: float64(cur[i].MaxNs) / 1e3, Orphans: d.Orphans})
			}
			res.Sections = append(res.Sections, s)
		}
		// The max is per section: reset it.
		for i := range targets {
			cur[i].MaxNs = 0
			_ = objs.Stats.Update(uint32(i), &cur[i], ebpf.UpdateExist)
		}
		prev = cur
		return nil
	}
	sc := bufio.NewScanner(stdout)
	var runErr error
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "@@") {
			fmt.Fprintln(os.Stderr, line)
			continue
		}
		if links == nil {
			if err := attach(); err != nil {
				runErr = err
				break
			}
		}
		if err := snapshot(); err != nil {
			runErr = err
			break
		}
		section = ""
		if name, ok := strings.CutPrefix(line, "@@section "); ok {
			section = name
		}
		if _, err := io.WriteString(stdin, "go\n"); err != nil {
			runErr = fmt.Errorf("answer the program: %w", err)
			break
		}
	}
	_ = stdin.Close()
	if runErr != nil {
		_ = cmd.Process.Kill()
	}
	werr := cmd.Wait()
	if runErr != nil {
		return nil, runErr
	}
	if werr != nil {
		return res, fmt.Errorf("%s: %w", argv[0], werr)
	}
	if len(res.Sections) == 0 {
		return nil, errors.New("the program marked no section (print \"@@section NAME\" and read a line)")
	}
	return res, nil
}

// driverOf returns the libcuda that pid has mapped, as a path this process can open.
func driverOf(pid int) (string, error) {
	maps, err := proc.ReadMaps(pid)
	if err != nil {
		return "", fmt.Errorf("read the maps of pid %d: %w", pid, err)
	}
	for _, m := range maps {
		if m.FileBacked() && proc.IsCUDADriver(m.Path) {
			return fmt.Sprintf("/proc/%d/root%s", pid, m.Path), nil
		}
	}
	return "", fmt.Errorf("pid %d has not loaded libcuda at its first marker", pid)
}

func printTable(w io.Writer, r *Result) {
	fmt.Fprintf(w, "library %s, %d functions probed\n", r.Library, r.Probed)
	for _, s := range r.Sections {
		fmt.Fprintf(w, "\n## %s\n", s.Name)
		fmt.Fprintf(w, "%-48s %8s %12s %10s %10s\n", "symbol", "calls", "total µs", "µs/call", "max µs")
		for _, row := range s.Rows {
			per := 0.0
			if row.Returns > 0 {
				per = row.TotalUs / float64(row.Returns)
			}
			fmt.Fprintf(w, "%-48s %8d %12.1f %10.2f %10.1f", row.Symbol, row.Calls, row.TotalUs, per, row.MaxUs)
			if row.Orphans > 0 {
				fmt.Fprintf(w, " (%d returns without entry)", row.Orphans)
			}
			fmt.Fprintln(w)
		}
	}
}
