# Sourced by the bench scripts (needs $P, a Python). PIN=1: the workload on one physical core (CPU
# $PIN_CPU, default 4, and its SMT siblings), specprof and everything else it starts on the other
# CPUs, so that neither the agent nor a sibling thread shares the workload's core. Sets the command
# prefixes W (the workload) and A (the rest); both empty without PIN=1.
W=() A=()
if [ "${PIN:-0}" = 1 ]; then
  pin_c=${PIN_CPU:-4}
  pin_wl=$(cat "/sys/devices/system/cpu/cpu$pin_c/topology/thread_siblings_list" 2>/dev/null || echo "$pin_c")
  pin_rest=$("$P" -c 'import os,sys
w=set()
for part in sys.argv[1].split(","):
    a,_,b=part.partition("-"); w.update(range(int(a),int(b or a)+1))
print(",".join(str(c) for c in sorted(os.sched_getaffinity(0)-w)))' "$pin_wl")
  W=(taskset -c "$pin_wl") A=(taskset -c "$pin_rest")
  echo "pinned: workload on CPUs $pin_wl, specprof on $pin_rest"
fi
