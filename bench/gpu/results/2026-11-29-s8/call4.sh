# session 8, device call 4: which window switch crashes the graph loop (2ms/10ms windows: 3 of 4
# runs crashed in call 3)
set -u
ch() { local name=$1; shift; OUT=$OUT/$name bash bench/gpu/crashhunt.sh 4 3000 -- --cupti-duty 2ms/10ms "$@" 2>&1 | tail -5 | sed "s/^/$name: /"; }
SPECPROF_CUPTI_DUTY_KINDS=kernel,memcpy,memset ch gpuonly
SPECPROF_CUPTI_DUTY_KINDS=api,sync ch apionly
ch graphlevel --cupti-graphs graph
