# session 8, device call 6 (the last 150 s): the switch callbacks without cuptiEnableDomain; losses
set -u
rep() { /opt/torch/.venv/bin/python3 -c 'import json,sys
r=json.load(open(sys.argv[1])); g=(r.get("processes") or [{}])[0].get("gpu") or {}; l=r.get("loss") or {}
print(sys.argv[2], "switches", g.get("lib_gpu_switches"), "ns", g.get("lib_gpu_switch_ns"), "max", g.get("lib_gpu_switch_max_ns"),
      "no-api", l.get("launches_without_cupti_api_record"), "outside", l.get("launches_outside_gpu_windows"), "gpu-no-api", l.get("gpu_records_without_api_record"))' "$1" "$2"; }
OUT=$OUT/d100 bash bench/gpu/crashhunt.sh 1 3000 -- --cupti-duty 100ms/1s 2>&1 | tail -2
rep /tmp/crashhunt-run-1/sp/report.json d100
OUT=$OUT/d2 bash bench/gpu/crashhunt.sh 2 3000 -- --cupti-duty 2ms/10ms 2>&1 | tail -3
rep /tmp/crashhunt-run-1/sp/report.json d2-1; rep /tmp/crashhunt-run-2/sp/report.json d2-2
