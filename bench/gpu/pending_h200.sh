#!/bin/bash
# The H200 runs prepared in sessions 5 and 6 (accuracy, standing, hf ran in session 6): from the
# repository root, as root, on an nvidia-h200 machine with build/specprof and
# build/libspecprof_cupti.so carried. One part per call (each fits the 600 s limit); results are
# copied flat into $OUT (table.md, raw.csv, phases.csv per suite run).
#   accuracy   (issue 4) per-phase GPU active / elapsed against CUDA events: the GPU-bound eager
#              loop (hidden 8192) and the graph loop, with (c8) fullev: events in specprof's runs.
#   standing   (issue 6) the injected library's standing cost on the graph loop, split:
#              fullidle, idlenoov (no OVERHEAD kind), idleoff (not subscribed), fullduty, dutynoov.
#   hf         (issue 6) HF assisted generation: none, full, fullduty, torchprof, 3 repetitions.
#   detach     (issue 6) 6 windows of 100ms/1s (or 2 of 500ms/5s), then CUPTI detached for good, on
#              the graph loop; then the HF cells not measured yet: (b), (e), (f), (g), 2 repetitions.
#   graphacc   (issue 4) graph-level tracing's per-phase GPU time against CUDA events.
#   hostgap    (issue 4) the accuracy runs again with the host gaps (session 7): events around a
#              phase that starts on an idle GPU or ends in a host sync count host time; does
#              elapsed + the host gaps add up to the events (same run, and separate runs)?
#   eagerv4    (issue 6) the one cell without an H200 number: (f) v4 wall timers on the eager loop,
#              against (a) none, 2 reps (about 2 minutes).
#   s8         (issue 6) session 8: the eagerv4 cell; the added cost per eager launch of eBPF, eBPF +
#              CUPTI and torch.profiler (launchcost_h200.sh, 3 reps); one HF eBPF run for its launches
#              per cycle (cost = launches x added cost, free of HF's run-to-run noise).
#   s9         (issue 6) prepared in session 8 after its device time ran out: the GPU kinds switched
#              by application threads through per-call callbacks (the H200 runs of session 8 used
#              the whole driver domain's callbacks: no crash in 6 runs, but about 4,600 launches a
#              run lost their API record): the 2ms/10ms stress that crashed 6 of 8 runs before, with
#              the losses per run; the duty cost on the graph loop; the pinned launch cost with eBPF.
#   s9b        (issue 6) s9 ran in session 9: no crash in 6 runs, but about 3,700 launches a run
#              inside windows still lost their API record. Where in the window (bench/gpu/joinloss.sh:
#              as shipped, only the GPU kinds windowed, only the API kinds windowed, no windows); and
#              CUPTI's activity API without its callbacks (SPECPROF_CUPTI_SUBSCRIBE=0): its cost on
#              the graph loop and per launch.
#   s9c        (issue 6) s9b found the windows empty: no kernel record in any window, and 89 % of the
#              windows' launches without API record, when the sender switched the API kinds on and an
#              application thread the GPU kinds; either switched alone recorded everything. The fix
#              (every windowed kind goes on in the application thread's switch), checked: joins and
#              kernels per window (100ms/1s, 2ms/10ms), the crash stress with windows that record,
#              the duty cost.
#   s9d        (issue 6) s9c: with windows that record, the 2ms/10ms stress crashed the graph loop in 3
#              of 5 runs (heap corruption in a CUDA thread) although application threads switched. Now no
#              window opens once the process has built CUDA graphs: does switching crash the eager loop
#              (no graphs) too, and does the graph loop run clean with the windows stopped?
#   s9e        (issue 6) s9d: the eager loop crashed too (4 of 4 runs, 2ms/10ms). The sender and the
#              application thread that switches no longer call CUPTI at the same time (cupti_mu, taken
#              with trylock by the application thread): the same stress again.
#   s9f        (issue 6) s9e: still 5 of 5 (a segfault in the interpreter: heap corruption). Switches
#              are now applied only at the exit of a call that waits for the GPU (stream, context or
#              event synchronisation, a synchronous copy to the host): the eager stress, and the graph
#              stress with the windows kept going after the capture (SPECPROF_CUPTI_DUTY_GRAPHS=1).
#   s10        (issue 6) prepared in session 9: whether the graph guard can go (5 more graph-loop runs
#              at 2ms/10ms with the guard lifted, about 3,800 switches: at the old rate of one crash per
#              650, no crash in them has a 0.3 % chance), and the duty cost with windows that record on
#              the eager loop and HF (§13 measured it on the graph loop only). About 8 minutes.
#   s10b       (issue 6) what duty mode's standing cost is made of, per pinned eager launch
#              (launchcost_h200.sh; session 10: too noisy, and its baseline method was missing).
#   s10c       (issue 6) the same split as tok/s of the launch-bound eager loop (bench/gpu/idlecost.sh).
#   s10d       (issue 6) s10c pinned, 4 reps, fewer methods (§14c).
#   s11        (issue 6) prepared in session 10: which kind, once enabled and off again, leaves CUPTI
#              costing the eager loop, and what API records made in CUPTI's callbacks
#              (SPECPROF_CUPTI_API_SOURCE=callbacks) save over CUPTI's API kinds, full and idle (5 reps;
#              about 8 minutes).
#   s11b       (issue 6) the same on the graph loop (suite: full, fullcb, fullduty, dutycb) and per
#              pinned eager launch (launchcost: cbapi); about 7 minutes. Check first that fullcb's
#              GPU cycles have their kernels (the table's kernels per cycle, no launches without API
#              record): whether CUPTI gives torch's kernels the runtime call's correlation id when
#              its RUNTIME kind is off is known only from the H200.
#   s11c       (issue 6) s11 cut down to fit one call: eager loop, none ebpf full fullcb idle idlecb,
#              3 reps (about 4 minutes).
#   s12        (issue 6) the callbacks' API records without their duplicates: pinned launch cost
#              (none, full, cbapi; 5 reps) and the eager loop (none, full, fullcb; 3 reps); about
#              5 minutes.
#   s12b       (issue 6) HF assisted generation pinned (suite --pin 4: the workload alone on one core,
#              specprof on the others), none / ebpf / full / fullduty / torchprof, 3 reps as the budget
#              allows; every run's files exported to $OUT/hf12 as it ends (about 9 minutes).
#   s12c       (issue 6) s12b's HF duty runs lost the API records of about 10,000 launches inside
#              windows in 2 of 3 runs (0 in the third; 28-322 in session 6, before the agent's idle
#              flush): debug logs of windows, flush requests and answers and the lost launches, with the
#              idle flush on and off (SPECPROF_QUIET_FLUSH=off), 2 runs each, pinned as s12b.
#   s12d       (issue 6) s12c: the idle flush is not it (14,185 lost with it off); the first runs on a
#              fresh machine lose whole windows, later ones none, and the records do arrive. Every call
#              and API record (--events) of 2 such runs, and bench/gpu/joinskew.py's table per window:
#              do the records contain their launches, and how far is each from the nearest?
#   s12e       (issue 6) s12d: from one window on, every API record and kernel carried one correlation
#              id (CUPTI's, stuck), so the joiner dropped them as duplicates; the first runs on each fresh
#              machine did so. Does it happen with the API records made in CUPTI's callbacks (the
#              DRIVER and RUNTIME kinds never switched)? Two such runs first, then one as shipped.
#   s12f       (issue 6) after s12e, duty-cycled tracing makes its API records in CUPTI's callbacks by
#              default: HF with the default (the first run on a fresh machine, where s12c-e lost
#              windows), then the 2ms/10ms graph-loop stress that lost about 10,500 API records a run
#              in sessions 9-10 (§13c, §14a), 2 runs.
#   s12g       (issue 6) the duty cost on the graph loop with s12f's default (API records from CUPTI's
#              callbacks): none / fullduty, 3 reps, about 2.5 minutes.
#   s13        (issue 6) prepared in session 12: HF unpinned (pinning put CUPTI's threads and the
#              library's sender on the workload's core, §16b), with the duty windows HF needs
#              (500ms/5s: its cycles are about 110 ms), 4 reps of shorter runs, exported as they end
#              (about 9 minutes). Check in the reports: api_records_duplicated 0, and how many cycles
#              the windows traced.
#   s13b       (issue 6, issue 4) HF's per-phase GPU figures against CUDA events of the same runs (fullev)
#              and of separate runs (cudaev), 2 reps (about 4 minutes): the one workload without that
#              comparison.
#   s13c       (issue 6) eBPF's cost on HF inside one process (bench/gpu/abattach.py): specprof attached
#              for 12 s and detached for 8 s in turn for 420 s around one HF process repeating its
#              prompts; each generate against the same prompt's generates without specprof on either
#              side (about 8 minutes). Separate processes differ by more than the cost (§11e, §17a).
#   s14        (issue 6) prepared in session 13: HF in steady state (hf_assisted.py now warms every
#              prompt up twice, §17c): none / ebpf / full / torchprof, 3 reps (about 9 minutes).
#              Then, if time is left, s13c again (AB_TOTAL_S=200).
#   s14b       (issue 6) where eBPF's ~4.6 us per HF launch go (§17c): abattach.py twice, 150 s each,
#              (1) specprof attach with SPECPROF_BPF_STATS=1 (each window logs its programs' mean run
#              time: the walk's own cost), (2) build/emptyprobe (empty programs on the same entry
#              points: the traps alone). Carry build/emptyprobe too
#              (go build -o build/emptyprobe ./bench/gpu/emptyprobe). About 7 minutes.
#   s14c       (issue 6) s14b: empty probes alone cost HF +9.2 % per generate, specprof's +20.6 %; no
#              per-launch probe can cost an eager loop 0.5 %. Probe windows (--probe-duty, session 14):
#              abattach.py with the probes in place 1 s of every 4 s and 250 ms of every 10 s, each
#              attach 30 s on / 15 s off for 200 s (about 8 minutes).
#   s14d       (issue 6) one 140 s attach with 1s/5s probe windows and -v (the windows' wall times):
#              generates overlapping a window cost +22 %, those between windows +4 % after the
#              first minute, within a baseline drift of about as much (§18d).
#   s15        (issue 6) prepared in session 14: whether probe windows leave a cost between windows.
#              250ms/10s windows, attached 60 s / away 20 s in turn for 400 s around one HF process,
#              split by bench/gpu/probewin.py (about 8 minutes); also the first one with the cheaper
#              learning phase (§18e).
#   s16        (issue 6) prepared in session 15: the sampled modes in the suite's HF steady state,
#              3 reps: none, ebpf, ebpfwin (--probe-duty 250ms/10s) and probedetach (2 GPU windows
#              with the probes held, CUPTI detached, then the probe windows); about 9 minutes.
#   s17        (issue 6) session 16: the detach of a graph process without cuptiFinalize (which breaks its
#              graphs, §11a): 3 duty windows, then every CUPTI callback off (graphquiet) or also
#              unsubscribed (graphunsub), against none / ebpf / fullduty on the graph loop, 3 reps (about
#              7 minutes). Do the graph launches survive, and does the cost fall to eBPF's?
#   s18        (issue 6) session 16: the cells still empty or marked noise: HF in steady state with (e) v3,
#              (f) v4 and (g) CUDA events against none, 2 reps; the eager loop with eBPF in probe windows
#              (ebpfwin) and the sampled mode (probedetach), 3 reps (about 9 minutes).
#   s19        (issue 6) prepared in session 16: s18's eager (c18) runs never left the GPU-window phase: their
#              measured loop (400 cycles, 1.2-2.2 s) ended before the second 500ms/2s window closed, so
#              CUPTI never detached and the probes stayed in place. The same methods on a loop of 8,000
#              cycles (about 27 s): none / ebpf / probedetach, 2 reps (about 5 minutes).
#   s20        (issue 6) prepared in session 16: does cuptiFinalize break only the graphs built or
#              instantiated while CUPTI traced kernels? Graph loop, windows opened on decode cycles (after
#              the capture), then CUPTI finalized (graphfinal, SPECPROF_CUPTI_GRAPH_DETACH=finalize-untraced),
#              against none / ebpf / graphquiet, 3 reps (about 6 minutes). A run whose graphs fail after the
#              finalize fails (tokens, rc); if none does, its cost should fall to about -1 % (c14).
#              Ran in session 17: all 3 graphfinal runs failed, and the mode and the suite's graphfinal
#              are gone (h200.md §21a); the entry stays as the command that was run.
#   s21        (issue 6) prepared in session 16: the sampled mode with GPU figures of HF's steady state. The
#              measured loop made 8 passes long (about 15 s) and 4 GPU windows of 500ms/4s opened on decode
#              cycles (probecycles, c22): the last ones fall in the loop. none / probecycles, 2 reps (about
#              5 minutes). Its per-phase GPU figures against (g) CUDA events need a cudaev run too (add it
#              when time allows).
#   s22        (issue 6) prepared in session 17: the graph loop's cost after a graph process's detach, more
#              runs (s17 -2.8 %, s20 -1.6 % for graphquiet): none / graphquiet / graphunsub, 5 reps (about
#              4 minutes); then the eager loop's sampled mode over a loop long enough to amortise its GPU
#              windows (30,000 cycles, about 50 s): none / probedetach, 2 reps (about 5 minutes).
#   s23        (issue 6) prepared in session 17: the GPU figures of the sampled modes against CUDA events: the
#              graph loop none / graphquiet (c19) / cudaev (g), 3 reps, and the eager loop of s19 (8,000
#              cycles) cudaev, 2 reps, against s19's probedetach (c18) windows (about 5 minutes).
#   s24        (issue 6) prepared in session 17: a check of the switch order (the GPU kinds on last, off
#              first) on the real driver: duty windows (c4) on the graph and eager loops, 2 reps, against
#              none; the table's lost-events column and the reports' launches without API record.
#   guard      (issue 6) --cupti-detach on the graph loop after the detach guard (session 7): 3 runs
#              of 6 windows (the detach is due after graph capture: refused, CUPTI stays attached)
#              and 2 of 1 window at start (due before graph capture: detached); bench/gpu/crashhunt.sh.
set -u
P=${PYTHON:-/opt/torch/.venv/bin/python3}
OUT=${OUT:-/tmp/specprof-pending}
mkdir -p "$OUT"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing || true
suite() { # NAME ARGS...
  local name=$1
  shift
  $P bench/gpu/suite.py --specprof build/specprof --cupti-lib build/libspecprof_cupti.so --python "$P" \
    --out "/tmp/$name" "$@" > "/tmp/$name.log" 2>&1
  echo "$name: rc $?"
  tail -3 "/tmp/$name.log"
  for f in table.md raw.csv phases.csv; do [ -f "/tmp/$name/$f" ] && cp "/tmp/$name/$f" "$OUT/$name-$f"; done
  grep -A16 "^Per-phase" "/tmp/$name/table.md" 2>/dev/null | cut -c1-400
}
hfduty() { # DIR: HF assisted generation under --cupti-duty 100ms/1s, pinned (PIN=1 pin.sh sourced), with
  # -v and --events: DIR.log, DIR.dbg (windows, flushes, losses), DIR.report.json, DIR.skew.md
  # (bench/gpu/joinskew.py); the environment passes through (SPECPROF_CUPTI_API_SOURCE, ...).
  local d=$1
  mkdir -p "$d"
  "${A[@]}" build/specprof run -v -q --interval 0 --cupti on --events "$d/events.jsonl" \
    --cupti-lib build/libspecprof_cupti.so --cupti-duty 100ms/1s --preset hf-assisted -o "$d" -- \
    "${W[@]}" "$P" bench/gpu/hf_assisted.py --prompts 4 --new-tokens 64 --noise-scale 0.0486968 \
    --result "$d/result.json" > "$d.log" 2>&1
  echo "$(basename "$d"): rc $? $(grep -o '"launches_without_cupti_api_record": [0-9]*\|"api_records_duplicated": [0-9]*' \
    "$d/report.json" | tr '\n' ' ')"
  "$P" bench/gpu/joinskew.py "$d/events.jsonl" "$d.log" > "$d.skew.md" 2>&1
  head -1 "$d.skew.md"
  grep -E "window|flush|without CUPTI|tok/s|WARN|ERROR" "$d.log" > "$d.dbg"
  cp "$d/report.json" "$d.report.json"
}
case "${1:-}" in
accuracy)
  suite eager8192 --workloads eagle-eager --methods none,full,cudaev,fullev \
    --eagle-args '--hidden 8192 --ffn 28672' --reps 2 --budget-s 250 --run-timeout-s 90
  suite graph --workloads eagle-graph --methods full,cudaev,fullev --reps 2 --budget-s 200 --run-timeout-s 60
  ;;
standing)
  suite standing --workloads eagle-graph --methods none,fullidle,idlenoov,idleoff,fullduty,dutynoov \
    --eagle-cycles 6000 --reps 3 --budget-s 540 --run-timeout-s 60
  ;;
hf)
  suite hf --workloads hf --methods none,full,fullduty,torchprof --reps 3 --budget-s 560 --run-timeout-s 120
  ;;
detach)
  # (issue 6) a few windows, then CUPTI detached for good (the windows start at cuInit, about 1-2 s
  # before the measured loop of 8.7 s: 6 windows of 100ms/1s detach in its middle).
  suite detach --workloads eagle-graph --methods none,fullduty,fulldetach,fulldetachlong,idledetach \
    --eagle-cycles 6000 --reps 3 --budget-s 380 --run-timeout-s 45
  suite hfcells --workloads hf --methods none,ebpf,v3,v4,cudaev --reps 2 --budget-s 200 --run-timeout-s 120
  ;;
graphacc)
  # (issue 4) graph-level tracing (--cupti-graphs graph) against CUDA events of separate runs: under
  # node-level tracing the graph replays ran 4 % slower (§10a); does recording one interval per
  # replay leave them alone?
  suite graphacc --workloads eagle-graph --methods none,cudaev,full,fullgraph --reps 3 --budget-s 300 \
    --run-timeout-s 60
  ;;
hostgap)
  suite hostgap --workloads eagle-eager --methods full,cudaev,fullev \
    --eagle-args '--hidden 8192 --ffn 28672' --reps 2 --budget-s 230 --run-timeout-s 90
  suite hostgapgraph --workloads eagle-graph --methods fullev,cudaev --reps 1 --budget-s 80 --run-timeout-s 60
  ;;
eagerv4)
  suite eagerv4 --workloads eagle-eager --methods none,v4,cudaev --reps 2 --budget-s 150 --run-timeout-s 60
  ;;
s8)
  suite eagerv4 --workloads eagle-eager --methods none,v4,cudaev --reps 2 --budget-s 150 --run-timeout-s 60
  OUT=$OUT/launchcost bash bench/gpu/launchcost_h200.sh 3 40
  suite hflaunch --workloads hf --methods ebpf,full --reps 1 --budget-s 150 --run-timeout-s 120
  ;;
s9)
  OUT=$OUT/stress bash bench/gpu/crashhunt.sh 6 3000 -- --cupti-duty 2ms/10ms
  suite dutycost --workloads eagle-graph --methods none,full,fullduty --reps 3 --eagle-cycles 3000 --budget-s 200 \
    --run-timeout-s 45
  PIN=1 OUT=$OUT/lcpin bash bench/gpu/launchcost_h200.sh 3 40 none ebpf full idle torchprof
  (cd "$OUT" && tar czf lcpin.tgz lcpin && rm -f lcpin/*.json)
  ;;
s9b)
  OUT=$OUT/joinloss bash bench/gpu/joinloss.sh 3000 duty gpuonly apionly full
  (cd "$OUT" && tar czf joinloss.tgz joinloss && rm -rf joinloss)
  # Also ran the suite's fullnosub and launchcost's nosub, nosubk, nosubapi (SPECPROF_CUPTI_SUBSCRIBE=0),
  # a cost experiment whose knob is removed since (results: docs/overhead.md).
  ;;
s9c)
  OUT=$OUT/joinloss bash bench/gpu/joinloss.sh 3000 duty short
  (cd "$OUT" && tar czf joinloss.tgz joinloss && rm -rf joinloss)
  OUT=$OUT/stress bash bench/gpu/crashhunt.sh 5 3000 -- --cupti-duty 2ms/10ms
  (cd "$OUT" && tar czf stress.tgz stress && rm -rf stress)
  suite dutyapp --workloads eagle-graph --methods none,full,fullduty --reps 3 --eagle-cycles 3000 --budget-s 170 \
    --run-timeout-s 45
  ;;
s9d)
  OUT=$OUT/eager GRAPHS=off bash bench/gpu/crashhunt.sh 4 3000 -- --cupti-duty 2ms/10ms
  OUT=$OUT/graph bash bench/gpu/crashhunt.sh 2 3000 -- --cupti-duty 2ms/10ms
  (cd "$OUT" && tar czf stress.tgz eager graph && rm -rf eager graph)
  ;;
s9e)
  OUT=$OUT/eager GRAPHS=off bash bench/gpu/crashhunt.sh 5 3000 -- --cupti-duty 2ms/10ms
  (cd "$OUT" && tar czf stress.tgz eager && rm -rf eager)
  ;;
s9f)
  OUT=$OUT/eager GRAPHS=off bash bench/gpu/crashhunt.sh 4 3000 -- --cupti-duty 2ms/10ms
  OUT=$OUT/graph SPECPROF_CUPTI_DUTY_GRAPHS=1 bash bench/gpu/crashhunt.sh 2 3000 -- --cupti-duty 2ms/10ms
  (cd "$OUT" && tar czf stress.tgz eager graph && rm -rf eager graph)
  ;;
s10)
  OUT=$OUT/graph SPECPROF_CUPTI_DUTY_GRAPHS=1 bash bench/gpu/crashhunt.sh 5 3000 -- --cupti-duty 2ms/10ms
  (cd "$OUT" && tar czf stress.tgz graph && rm -rf graph)
  suite eagerduty --workloads eagle-eager --methods none,full,fullduty --reps 3 --eagle-cycles 3000 \
    --budget-s 200 --run-timeout-s 60
  suite hfduty --workloads hf --methods none,full,fullduty --reps 1 --budget-s 150 --run-timeout-s 120
  ;;
s10b)
  # What the duty mode's standing cost (idle, +1.3 µs a launch over eBPF, §13d) is made of.
  PIN=1 OUT=$OUT/lcpin bash bench/gpu/launchcost_h200.sh 3 40 ebpf idle idlenoov injcb inj
  ;;
s10c)
  # The same split on the launch-bound eager loop, where a microsecond per launch shows.
  OUT=$OUT/idle bash bench/gpu/idlecost.sh 3 1500
  (cd "$OUT" && tar czf idle.tgz idle && rm -rf idle)
  ;;
s10d)
  # s10c was too noisy to split (none ranged 1059-1585 tok/s): pinned, more reps, fewer methods.
  PIN=1 OUT=$OUT/idlepin bash bench/gpu/idlecost.sh 4 1000 none ebpf full idle injcb inj
  (cd "$OUT" && tar czf idlepin.tgz idlepin && rm -rf idlepin)
  ;;
s11)
  # Which kind, once enabled and off again, leaves CUPTI costing the eager loop (§14c); more reps
  # than s10d, whose runs spread by ±30 %.
  PIN=1 OUT=$OUT/idlekinds bash bench/gpu/idlecost.sh 5 1000 none ebpf full fullcb idle idlecb idlek idleapi injcb
  (cd "$OUT" && tar czf idlekinds.tgz idlekinds && rm -rf idlekinds)
  ;;
s11b)
  suite cbgraph --workloads eagle-graph --methods none,full,fullcb,fullduty,dutycb --reps 3 --eagle-cycles 3000 \
    --budget-s 280 --run-timeout-s 60
  PIN=1 OUT=$OUT/lcpin bash bench/gpu/launchcost_h200.sh 3 40 none ebpf full cbapi
  (cd "$OUT" && tar czf lcpin.tgz lcpin && rm -rf lcpin)
  ;;
s11c)
  # s11 cut at the call's 600 s before its table: fewer methods and reps, tarred as they finish.
  PIN=1 OUT=$OUT/idlecb bash bench/gpu/idlecost.sh 3 1000 none ebpf full fullcb idle idlecb
  (cd "$OUT" && tar czf idlecb.tgz idlecb && rm -rf idlecb)
  ;;
s12)
  # After the callbacks' API records lost their duplicates (a cuLaunchKernel made in cudaLaunchKernel
  # got a record of its own: 110,254 extra in s11c's 1,000 eager cycles): per pinned launch, then
  # the eager loop, each tarred as soon as it ends (a call that runs past 600 s brings nothing back
  # that is not tarred). Check fullcb's api_records against full's in the reports.
  PIN=1 OUT=$OUT/lc12 bash bench/gpu/launchcost_h200.sh 5 40 none full cbapi
  (cd "$OUT" && tar czf lc12.tgz lc12 && rm -rf lc12)
  PIN=1 OUT=$OUT/idle12 bash bench/gpu/idlecost.sh 3 1000 none full fullcb
  (cd "$OUT" && tar czf idle12.tgz idle12 && rm -rf idle12)
  ;;
s12b)
  $P bench/gpu/suite.py --specprof build/specprof --cupti-lib build/libspecprof_cupti.so --python "$P" \
    --out /tmp/hf12 --export "$OUT/hf12" --pin 4 --workloads hf --methods none,ebpf,full,fullduty,torchprof \
    --reps 3 --budget-s 530 --run-timeout-s 100 > /tmp/hf12.log 2>&1
  echo "hf12: rc $?"
  grep -A12 "^| method" /tmp/hf12/table.md | head -30
  ;;
s12c)
  PIN=1 . bench/gpu/pin.sh
  mkdir -p /tmp/hfloss
  for i in 1 2; do
    for q in on off; do
      d=/tmp/hfloss/$q-$i; mkdir -p "$d"
      SPECPROF_QUIET_FLUSH=$q "${A[@]}" build/specprof run -v -q --interval 0 --cupti on \
        --cupti-lib build/libspecprof_cupti.so --cupti-duty 100ms/1s --preset hf-assisted -o "$d" -- \
        "${W[@]}" "$P" bench/gpu/hf_assisted.py --prompts 4 --new-tokens 64 --noise-scale 0.0486968 \
        --result "$d/result.json" > "$d.log" 2>&1
      echo "$q-$i: rc $? $(grep -o '"launches_without_cupti_api_record": [0-9]*' "$d/report.json")"
      grep -E "window|flush|without CUPTI|tok/s|WARN|ERROR" "$d.log" > "$d.dbg"
      cp "$d/report.json" "$d.report.json"
    done
  done
  (cd /tmp/hfloss && tar czf "$OUT/hfloss.tgz" ./*.dbg ./*.report.json)
  ;;
s12d)
  PIN=1 . bench/gpu/pin.sh
  mkdir -p /tmp/skew
  for i in 1 2; do
    hfduty /tmp/skew/r$i
    gzip -c /tmp/skew/r$i/events.jsonl > /tmp/skew/r$i.events.jsonl.gz
  done
  (cd /tmp/skew && tar czf "$OUT/skew.tgz" ./*.dbg ./*.report.json ./*.skew.md)
  for f in /tmp/skew/*.gz; do [ "$(stat -c %s "$f")" -lt 16000000 ] && cp "$f" "$OUT/"; done
  ;;
s12e)
  PIN=1 . bench/gpu/pin.sh
  mkdir -p /tmp/skew
  for r in cb1:callbacks cb2:callbacks act3:activity; do
    SPECPROF_CUPTI_API_SOURCE=${r#*:} hfduty /tmp/skew/${r%%:*}
    gzip -c /tmp/skew/${r%%:*}/events.jsonl > "$OUT/${r%%:*}.events.jsonl.gz"
  done
  (cd /tmp/skew && tar czf "$OUT/skew.tgz" ./*.dbg ./*.report.json ./*.skew.md)
  ;;
s12f)
  PIN=1 . bench/gpu/pin.sh
  mkdir -p /tmp/skew
  hfduty /tmp/skew/hf
  OUT=/tmp/skew/graph SPECPROF_CUPTI_DUTY_GRAPHS=1 bash bench/gpu/crashhunt.sh 2 3000 -- --cupti-duty 2ms/10ms
  tail -5 /tmp/skew/graph/summary.txt
  (cd /tmp/skew && tar czf "$OUT/s12f.tgz" ./hf.skew.md ./hf.report.json ./graph)
  ;;
s12g)
  $P bench/gpu/suite.py --specprof build/specprof --cupti-lib build/libspecprof_cupti.so --python "$P" \
    --out /tmp/duty12 --export "$OUT/duty12" --workloads eagle-graph --methods none,fullduty --reps 3 \
    --eagle-cycles 3000 --budget-s 150 --run-timeout-s 45 > /tmp/duty12.log 2>&1
  echo "duty12: rc $?"
  grep -A4 "^| method" /tmp/duty12/table.md | head -6
  ;;
s13)
  $P bench/gpu/suite.py --specprof build/specprof --cupti-lib build/libspecprof_cupti.so --python "$P" \
    --out /tmp/hf13 --export "$OUT/hf13" --workloads hf --methods none,ebpf,full,fullduty,torchprof \
    --reps 4 --hf-new-tokens 48 --budget-s 530 --run-timeout-s 90 > /tmp/hf13.log 2>&1
  echo "hf13: rc $?"
  grep -A8 "^| method" /tmp/hf13/table.md | head -10
  ;;
s13b)
  $P bench/gpu/suite.py --specprof build/specprof --cupti-lib build/libspecprof_cupti.so --python "$P" \
    --out /tmp/hfacc --export "$OUT/hfacc" --workloads hf --methods fullev,cudaev --reps 2 --hf-new-tokens 48 \
    --budget-s 300 --run-timeout-s 90 > /tmp/hfacc.log 2>&1
  echo "hfacc: rc $?"
  grep -A20 "^Per-phase" /tmp/hfacc/table.md | head -24
  ;;
s13c)
  mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing || true
  $P bench/gpu/abattach.py --specprof build/specprof --python "$P" --out /tmp/ab13 --on-s 12 --off-s 8 \
    --total-s ${AB_TOTAL_S:-420} -- --new-tokens 48 > /tmp/ab13.log 2>&1
  echo "ab13: rc $?"
  tail -5 /tmp/ab13.log
  cat /tmp/ab13/table.md
  (cd /tmp/ab13 && tar czf "$OUT/ab13.tgz" ./table.md ./ab.json ./workload.json ./workload.stderr ./on-*/stderr.txt ./on-1/report.json)
  ;;
s14)
  $P bench/gpu/suite.py --specprof build/specprof --cupti-lib build/libspecprof_cupti.so --python "$P" \
    --out /tmp/hf14 --export "$OUT/hf14" --workloads hf --methods none,ebpf,full,torchprof \
    --reps 3 --hf-new-tokens 48 --budget-s ${S14_BUDGET_S:-530} --run-timeout-s 120 > /tmp/hf14.log 2>&1
  echo "hf14: rc $?"
  grep -A8 "^| method" /tmp/hf14/table.md | head -10
  ;;
s14b)
  mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing || true
  SPECPROF_BPF_STATS=1 $P bench/gpu/abattach.py --specprof build/specprof --python "$P" --out /tmp/ab14s \
    --on-s 12 --off-s 8 --total-s ${AB_TOTAL_S:-150} -- --new-tokens 48 > /tmp/ab14s.log 2>&1
  echo "ab14s: rc $?"
  grep -A3 "^| generates" /tmp/ab14s/table.md
  grep -h "BPF program run time" /tmp/ab14s/on-*/stderr.txt | cut -d" " -f3- | head -30
  $P bench/gpu/abattach.py --attach-cmd "build/emptyprobe -pid {pid} -duration {duration}" --python "$P" \
    --out /tmp/ab14e --on-s 12 --off-s 8 --total-s ${AB_TOTAL_S:-150} -- --new-tokens 48 > /tmp/ab14e.log 2>&1
  echo "ab14e: rc $?"
  grep -A3 "^| generates" /tmp/ab14e/table.md
  for d in ab14s ab14e; do (cd /tmp/$d && tar czf "$OUT/$d.tgz" ./table.md ./ab.json ./workload.json ./workload.stderr ./on-*/stderr.txt); done
  ;;
s14c)
  # Probe windows (--probe-duty): the attach's cost with the probes in place 1 s of every 4 s, then
  # 250 ms of every 10 s; each attach's report.json gives the share of the time they were in place.
  mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing || true
  for d in 1s/4s 250ms/10s; do
    n=ab14d${d//\//-}
    $P bench/gpu/abattach.py --specprof build/specprof --python "$P" --out /tmp/$n \
      --attach-args "--cupti off --spec-metrics off --preset hf-assisted --probe-duty $d" \
      --on-s ${AB_ON_S:-30} --off-s ${AB_OFF_S:-15} --total-s ${AB_TOTAL_S:-200} -- --new-tokens 48 > /tmp/$n.log 2>&1
    echo "$n: rc $?"
    grep -A3 "^| generates" /tmp/$n/table.md
    grep -ho '"share": [0-9.]*\|"windows": [0-9]*\|"detach_mean_ns": [0-9]*\|"cycles": [0-9]*\|"cycles_cut_by_probe_windows": [0-9]*' \
      /tmp/$n/on-1/report.json | tr '\n' ' '; echo
    (cd /tmp/$n && tar czf "$OUT/$n.tgz" ./table.md ./ab.json ./workload.json ./workload.stderr ./on-*/stderr.txt ./on-*/report.json)
  done
  ;;
s14d)
  # One long attach with probe windows (1s/5s) and debug logs (each window's open and close, wall
  # clock): generates made between windows against those overlapping one and those made without
  # specprof (bench/gpu/probewin.py splits them).
  mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing || true
  $P bench/gpu/abattach.py --specprof build/specprof --python "$P" --out /tmp/ab14w \
    --attach-args "--cupti off --spec-metrics off --preset hf-assisted --probe-duty ${PD:-1s/5s} -v" \
    --on-s ${AB_ON_S:-150} --off-s ${AB_OFF_S:-20} --total-s ${AB_TOTAL_S:-190} -- --new-tokens 48 > /tmp/ab14w.log 2>&1
  echo "ab14w: rc $?"
  grep -A3 "^| generates" /tmp/ab14w/table.md
  grep -h "probe window" /tmp/ab14w/on-*/stderr.txt > /tmp/ab14w/windows.txt
  (cd /tmp/ab14w && tar czf "$OUT/ab14w.tgz" ./table.md ./ab.json ./workload.json ./workload.stderr ./windows.txt ./on-*/report.json)
  ;;
s15)
  # s14d left +4 % between windows against a baseline that drifted as much. Attached 60 s and away
  # 20 s in turn, so that each attach has its own reference on either side; the windows' share
  # is the one that would meet 0.5 % (250ms/10s). bench/gpu/probewin.py --skip-s 30 splits the
  # generates (the agent's first 30 s of each attach are its learning).
  mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing || true
  $P bench/gpu/abattach.py --specprof build/specprof --python "$P" --out /tmp/ab15 \
    --attach-args "--cupti off --spec-metrics off --preset hf-assisted --probe-duty ${PD:-250ms/10s} -v" \
    --on-s ${AB_ON_S:-60} --off-s ${AB_OFF_S:-20} --total-s ${AB_TOTAL_S:-400} -- --new-tokens 48 > /tmp/ab15.log 2>&1
  echo "ab15: rc $?"
  grep -A3 "^| generates" /tmp/ab15/table.md
  grep -h "probe window" /tmp/ab15/on-*/stderr.txt > /tmp/ab15/windows.txt
  $P bench/gpu/probewin.py /tmp/ab15 --skip-s 30 | tee /tmp/ab15/probewin.md
  (cd /tmp/ab15 && tar czf "$OUT/ab15.tgz" ./table.md ./ab.json ./workload.json ./workload.stderr ./windows.txt ./probewin.md ./on-*/report.json)
  ;;
s16)
  # The sampled modes for launch-bound loops in the suite's HF steady state (s14's setup): eBPF in
  # probe windows, and GPU tracing in 2 windows with the probes held, CUPTI detached, then probe
  # windows. Each run is one specprof session of ~35 s: the agent's learning is inside it.
  suite hf16 --export "$OUT/hf16" --workloads hf --methods none,ebpf,ebpfwin,probedetach \
    --reps 3 --hf-new-tokens 48 --budget-s ${S16_BUDGET_S:-530} --run-timeout-s 120
  grep -A8 "^| method" /tmp/hf16/table.md | head -10
  ;;
s17)
  suite graph17 --export "$OUT/graph17" --workloads eagle-graph --methods none,ebpf,fullduty,graphquiet,graphunsub \
    --eagle-cycles 6000 --reps 3 --budget-s ${S17_BUDGET_S:-450} --run-timeout-s 45
  grep -A8 "^| method" /tmp/graph17/table.md | head -10
  grep -h "not finalized\|specprof-cupti" /tmp/graph17/table.md /tmp/graph17/runs/*/stderr* 2>/dev/null | sort | uniq -c | head
  ;;
s18)
  suite hf18 --export "$OUT/hf18" --workloads hf --methods none,v3,v4,cudaev \
    --reps 2 --hf-new-tokens 48 --budget-s ${S18_HF_BUDGET_S:-300} --run-timeout-s 120
  grep -A7 "^| method" /tmp/hf18/table.md | head -8
  suite eager18 --export "$OUT/eager18" --workloads eagle-eager --methods none,ebpf,ebpfwin,probedetach \
    --reps 3 --budget-s ${S18_EAGER_BUDGET_S:-200} --run-timeout-s 60
  grep -A7 "^| method" /tmp/eager18/table.md | head -8
  ;;
s19)
  suite eager19 --workloads eagle-eager --methods none,ebpf,probedetach --eagle-cycles 8000 \
    --reps 2 --budget-s ${S19_BUDGET_S:-330} --run-timeout-s 90
  grep -A6 "^| method | runs" /tmp/eager19/table.md | head -7
  grep "CUPTI detached\|not finalized" /tmp/eager19/table.md
  ;;
s20)
  suite graph20 --workloads eagle-graph --methods none,ebpf,graphquiet,graphfinal \
    --eagle-cycles 6000 --reps 3 --budget-s ${S20_BUDGET_S:-400} --run-timeout-s 45
  grep -A6 "^| method | runs" /tmp/graph20/table.md | head -7
  grep "CUPTI detached\|not finalized\|failed" /tmp/graph20/table.md | head
  ;;
s21)
  suite hf21 --workloads hf --methods none,probecycles --reps 2 --hf-new-tokens 48 --hf-args "--loop-passes 8" \
    --budget-s ${S21_BUDGET_S:-330} --run-timeout-s 150
  grep -A4 "^| method | runs" /tmp/hf21/table.md | head -5
  grep -A8 "^Per-phase" /tmp/hf21/table.md | head -10
  ;;
s22)
  suite graph22 --workloads eagle-graph --methods none,graphquiet,graphunsub \
    --eagle-cycles 6000 --reps 5 --budget-s ${S22_GRAPH_BUDGET_S:-250} --run-timeout-s 45
  grep -A5 "^| method | runs" /tmp/graph22/table.md | head -6
  suite eager22 --workloads eagle-eager --methods none,probedetach --eagle-cycles 30000 \
    --reps 2 --budget-s ${S22_EAGER_BUDGET_S:-290} --run-timeout-s 120
  grep -A4 "^| method | runs" /tmp/eager22/table.md | head -5
  grep "CUPTI detached" /tmp/eager22/table.md | head -2
  ;;
s23)
  suite graph23 --workloads eagle-graph --methods none,graphquiet,cudaev \
    --eagle-cycles 6000 --reps 3 --budget-s ${S23_GRAPH_BUDGET_S:-220} --run-timeout-s 45
  grep -A5 "^| method | runs" /tmp/graph23/table.md | head -5
  suite eager23 --workloads eagle-eager --methods cudaev --eagle-cycles 8000 \
    --reps 2 --budget-s ${S23_EAGER_BUDGET_S:-120} --run-timeout-s 90
  ;;
s24)
  suite graph24 --workloads eagle-graph,eagle-eager --methods none,fullduty --eagle-cycles 3000 \
    --reps 2 --budget-s ${S24_BUDGET_S:-200} --run-timeout-s 45
  grep -A4 "^| method | runs" /tmp/graph24/table.md
  ;;
guard)
  OUT=$OUT/guard-late bash bench/gpu/crashhunt.sh 3 3000 -- --cupti-duty 100ms/1s --cupti-windows 6 --cupti-detach
  OUT=$OUT/guard-early bash bench/gpu/crashhunt.sh 2 3000 -- --cupti-duty 1ms/60s --cupti-windows 1 --cupti-detach
  ;;
*)
  echo "usage: $0 accuracy|standing|hf|detach|graphacc|hostgap|eagerv4|s8|s9|s9b|s9c|s9d|s9e|s9f|s10|s10b|s10c|s10d|s11|s11b|s11c|s12|s12b|s12c|s12d|s12e|s12f|s12g|s13|s13b|s13c|s14|s14b|s14c|s14d|s15|s16|s17|s18|s19|s20|s21|s22|s23|s24|guard" >&2
  exit 2
  ;;
esac
