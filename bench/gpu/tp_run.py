"""Tensor-parallel speculative decoding under specprof on a multi-GPU host (issue 7).

Runs the SGLang-shaped EAGLE loop (spec_loop.py --worker sglang) with --tp-size N (one process
per GPU, titles sglang::scheduler_TP0..N-1, torch.distributed + NCCL, the draft's and target's
MLP blocks split and all-reduced), CUDA graphs on and off, alternating plain runs and runs under
one `specprof run` (eBPF + CUPTI), and reports:
  - per rank: the all-reduces specprof saw (op, dtype, bytes, GPU time, NCCL algorithm/protocol,
    bus bandwidth), their share of the verify phase's GPU time, and the straggler per cycle;
  - bus bandwidth against an all_reduce_perf-style measurement made with torch.distributed in
    the same processes after the loop (spec_loop.py --nccl-perf, back-to-back all-reduces of the
    loop's sizes, in the plain runs);
  - tok/s with and without specprof (medians of the alternated runs), tokens identical;
  - with --jaeger: the cycles of both ranks in one Jaeger trace each (queried over Jaeger's API)
    and one of those traces saved; the Perfetto timeline of the first specprof run is kept.
Results: OUT/tp.md, OUT/tp.json, OUT/tp-runs.tar.gz (commands, logs, specprof's outputs).

  python3 bench/gpu/tp_run.py --specprof build/specprof --cupti-lib build/libspecprof_cupti.so \\
      --jaeger build/jaeger --out /tmp/tp

NVLink multicast stays off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1) in every process started.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def log(msg):
    sys.stderr.write("[tp_run %s] %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stderr.flush()


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=60).stdout.strip()
    except Exception as e:  # pragma: no cover
        return "error: %s" % e


class Jaeger:
    PORTS = {"SPECPROF_JAEGER_OTLP_GRPC_PORT": 4317, "SPECPROF_JAEGER_OTLP_HTTP_PORT": 4318,
             "SPECPROF_JAEGER_QUERY_PORT": 16686, "SPECPROF_JAEGER_QUERY_GRPC_PORT": 16685}

    def __init__(self, binary, logpath):
        self.log = open(logpath, "w")
        env = dict(os.environ, **{k: str(v) for k, v in self.PORTS.items()})
        self.p = subprocess.Popen([binary, "--config", os.path.join(ROOT, "testdata/jaeger/e2e.yaml")],
                                  env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                self.get("/api/services")
                return
            except Exception:
                time.sleep(0.3)
        raise RuntimeError("jaeger did not start: see %s" % logpath)

    def get(self, path):
        with urllib.request.urlopen("http://127.0.0.1:16686" + path, timeout=30) as r:
            return json.loads(r.read())

    def stop(self):
        self.p.kill()
        self.p.wait()
        self.log.close()


def run(cmd, logpath, timeout):
    t0 = time.monotonic()
    with open(logpath, "w") as f:
        f.write("$ %s\n" % " ".join(cmd))
        f.flush()
        # Its own session: a timeout kills the launcher, its ranks and specprof together.
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=dict(os.environ, **SAFE_ENV), cwd=ROOT,
                             start_new_session=True)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = "timeout"
            os.killpg(p.pid, 9)
            p.wait()
    if rc != 0:
        with open(logpath) as f:
            sys.stderr.write("---- %s (tail)\n%s\n----\n" % (logpath, f.read()[-6000:]))
    return rc, time.monotonic() - t0


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def cycles_in(path, windows):
    """specprof's cycle timelines (cycles.jsonl) of each rank inside that rank's measured loop."""
    out = {}
    try:
        f = open(path)
    except OSError:
        return out
    with f:
        for line in f:
            c = json.loads(line)
            w = windows.get(c.get("pid"))
            if w and not (w[0] <= c["start"] and c["end"] <= w[1]):
                continue
            out.setdefault(c["rank"], []).append(c)
    return out


def median(xs):
    return statistics.median(xs) if xs else None


def analyse(cyc, nccl_perf):
    """Per rank: collectives by size, allreduce share of verify, stragglers."""
    ranks = {}
    for rank, cs in sorted(cyc.items()):
        by_size = {}
        verify_busy = verify_coll = 0
        strag = {}
        tp_wait = []
        for c in cs:
            tp = c.get("tp")
            if tp:
                strag[tp["straggler"]] = strag.get(tp["straggler"], 0) + 1
                tp_wait.append(tp["wait_ns"])
            for ph in c["phases"]:
                st = ph.get("stats") or {}
                if ph["phase"] == "spec.verify":
                    verify_busy += st.get("gpu_busy_ns", 0)
                    verify_coll += sum(max(0, co.get("gpu_end", 0) - co.get("gpu_start", 0))
                                       for co in ph.get("collectives") or [])
                for co in ph.get("collectives") or []:
                    gpu = max(0, co.get("gpu_end", 0) - co.get("gpu_start", 0))
                    key = (co.get("op"), co.get("dtype") or "?", co.get("bytes", 0),
                           co.get("algorithm") or "?", co.get("protocol") or "?", ph["phase"])
                    d = by_size.setdefault(key, {"n": 0, "gpu_ns": [], "busbw": [], "wait_ns": [], "last": 0, "clock": {}})
                    d["n"] += 1
                    if gpu:
                        d["gpu_ns"].append(gpu)
                    if co.get("busbw_gbps"):
                        d["busbw"].append(co["busbw_gbps"])
                    ar = co.get("arrival")
                    if ar:
                        d["wait_ns"].append(ar["wait_ns"])
                        d["last"] += ar["last_rank"] == rank
                        ck = ar.get("clock") or "?"
                        d["clock"][ck] = d["clock"].get(ck, 0) + 1
        colls = []
        for (op, dt, nbytes, algo, proto, phase), d in sorted(by_size.items(), key=lambda kv: (kv[0][5], kv[0][2])):
            ref = next((p for p in nccl_perf if p["bytes"] == nbytes), None) if nbytes else None
            colls.append({"phase": phase, "op": op, "dtype": dt, "bytes": nbytes, "algorithm": algo, "protocol": proto,
                          "count": d["n"], "gpu_us_median": (median(d["gpu_ns"]) or 0) / 1e3,
                          "busbw_gbps_median": median(d["busbw"]),
                          "wait_us_median": (median(d["wait_ns"]) or 0) / 1e3, "last_arrivals": d["last"],
                          "arrival_clock": d["clock"],
                          "nccl_perf_busbw_gbps": ref and ref.get("graph_busbw_gbps", ref["busbw_gbps"]),
                          "nccl_perf_us": ref and ref.get("graph_time_us", ref["time_us"]),
                          # the eager loop's figure where the graph could not be captured
                          "nccl_perf_kind": ref and ("graph" if "graph_time_us" in ref else "eager")})
        ranks[rank] = {"cycles": len(cs), "collectives": colls,
                       "verify_gpu_busy_us_per_cycle": verify_busy / 1e3 / max(len(cs), 1),
                       "verify_allreduce_gpu_us_per_cycle": verify_coll / 1e3 / max(len(cs), 1),
                       "verify_allreduce_share": verify_coll / verify_busy if verify_busy else None,
                       "straggler_cycles": strag, "tp_wait_us_median": (median(tp_wait) or 0) / 1e3}
    return ranks


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--specprof", default="build/specprof")
    ap.add_argument("--cupti-lib", default="build/libspecprof_cupti.so")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--jaeger", default="", help="a Jaeger v2 binary: export OTLP to it and check the traces")
    ap.add_argument("--out", required=True)
    ap.add_argument("--tp-size", type=int, default=2)
    ap.add_argument("--graphs", default="on,off")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--cycles", type=int, default=1000)
    ap.add_argument("--noise-scale", type=float, default=0.051861341918379274,
                    help="the EAGLE family's calibrated scale (single-GPU calibration, results 2026-11-29)")
    ap.add_argument("--run-timeout-s", type=int, default=150)
    ap.add_argument("--specprof-args", default="")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    work = os.path.join(a.out, "runs")
    os.makedirs(work, exist_ok=True)
    res = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "argv": sys.argv, "runs": [],
           "versions": {"nvidia-smi": sh("nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader"),
                        "topology": sh("nvidia-smi topo -m"),
                        "torch": sh(a.python + " -c 'import torch,sys; print(torch.__version__, torch.version.cuda, "
                                    "torch.cuda.nccl.version(), torch.cuda.device_count(), sys.version.split()[0])'"),
                        "kernel": sh("uname -r")}}
    log("versions: %s" % json.dumps(res["versions"]))
    jaeger = None
    if a.jaeger:
        try:
            jaeger = Jaeger(a.jaeger, os.path.join(work, "jaeger.log"))
        except Exception as e:
            res["jaeger_error"] = str(e)
            log("jaeger: %s" % e)
    t_jaeger = time.time()
    spec = os.path.join(HERE, "spec_loop.py")
    n = 0
    for g in a.graphs.split(","):
        for rep in range(a.reps):
            order = ["plain", "specprof"] if rep % 2 == 0 else ["specprof", "plain"]
            for method in order:
                n += 1
                rid = "%02d-graphs-%s-%s-r%d" % (n, g, method, rep + 1)
                d = os.path.join(work, rid)
                os.makedirs(d, exist_ok=True)
                result = os.path.join(d, "result.json")
                inner = [a.python, spec, "--worker", "sglang", "--tp-size", str(a.tp_size), "--graphs", g,
                         "--cycles", str(a.cycles), "--noise-scale", repr(a.noise_scale), "--master-port", "0",
                         "--result", result, "--hang-dump-s", str(max(a.run_timeout_s - 15, 10))]
                if method == "plain" and rep == 0:
                    inner.append("--nccl-perf")
                cmd = inner
                if method == "specprof":
                    cmd = [a.specprof, "run", "-q", "--interval", "0", "--cupti", "on", "--cupti-lib", a.cupti_lib,
                           "--preset", "sglang-eagle", "-o", os.path.join(d, "specprof"), "--cycles-jsonl"]
                    if jaeger is not None and rep == 0:
                        cmd += ["--otlp-endpoint", "127.0.0.1:4317", "--otlp-insecure"]
                    cmd += a.specprof_args.split() + ["--"] + inner
                log("run %s" % rid)
                rc, secs = run(cmd, os.path.join(d, "log.txt"), a.run_timeout_s)
                r = load(result) or {}
                row = {"id": rid, "graphs": g, "method": method, "rep": rep + 1, "rc": rc, "wall_s": secs,
                       "ok": bool(r.get("ok")) and rc == 0, "tok_s": r.get("tok_s"), "accept_len": r.get("accept_len"),
                       "token_hash": r.get("token_hash"), "tokens": r.get("tokens"), "cycle_ms": r.get("cycle_ms"),
                       "tokens_equal_across_ranks": r.get("tokens_equal_across_ranks")}
                ranks = r.get("ranks") or []
                perf = next((x.get("nccl_perf") for x in ranks if x.get("nccl_perf")), None)
                if perf:
                    res.setdefault("nccl_perf", {})[g] = perf
                if method == "specprof":
                    rep_json = load(os.path.join(d, "specprof", "report.json")) or {}
                    row["specprof_ranks"] = rep_json.get("ranks")
                    row["specprof_loss"] = rep_json.get("loss")
                    windows = {x.get("pid"): x.get("loop_mono_ns") for x in ranks if x.get("loop_mono_ns")}
                    row["cyc"] = analyse(cycles_in(os.path.join(d, "specprof", "cycles.jsonl"), windows),
                                         res.get("nccl_perf", {}).get(g) or [])
                log("  rc %s, %.1f s, tok/s %s, accept %s, hash %s" % (rc, secs, row["tok_s"], row["accept_len"],
                                                                        row["token_hash"]))
                res["runs"].append(row)
                write(a, res)
    if jaeger is not None:
        try:
            time.sleep(3)
            res["jaeger"] = check_jaeger(jaeger, t_jaeger, a.out)
        except Exception as e:
            res["jaeger"] = {"error": str(e)}
        jaeger.stop()
    write(a, res)
    with tarfile.open(os.path.join(a.out, "tp-runs.tar.gz"), "w:gz") as tf:
        tf.add(work, arcname="runs")
    log("done: %s" % os.path.join(a.out, "tp.md"))


def check_jaeger(j, since, out):
    q = "/api/traces?service=specprof&limit=100000&start=%d&end=%d" % (int(since * 1e6), int((time.time() + 60) * 1e6))
    traces = j.get(q).get("data") or []
    both = 0
    sample = None
    for tr in traces:
        ranks = set()
        for sp in tr["spans"]:
            if sp["operationName"] == "cycle" and not sp.get("references"):
                for tag in tr["processes"][sp["processID"]].get("tags", []):
                    if tag["key"] == "specprof.tp_rank":
                        ranks.add(tag["value"])
        if len(ranks) >= 2:
            both += 1
            if sample is None or len(tr["spans"]) > len(sample["spans"]):
                sample = tr
    if sample is not None:
        with open(os.path.join(out, "jaeger-trace.json"), "w") as f:
            json.dump(sample, f)
    return {"traces": len(traces), "traces_with_all_ranks": both, "services": j.get("/api/services").get("data")}


def write(a, res):
    with open(os.path.join(a.out, "tp.json"), "w") as f:
        json.dump(res, f, indent=1, sort_keys=True, default=str)
    with open(os.path.join(a.out, "tp.md"), "w") as f:
        f.write(render(res))


def render(res):
    L = ["# Tensor-parallel EAGLE loop under specprof (%s)" % res["date"], "",
         "```", "$ " + " ".join(res["argv"]), "```", "",
         "Versions: `%s`; torch/CUDA/NCCL/GPUs/Python: `%s`; kernel `%s`" % (
             res["versions"]["nvidia-smi"].replace("\n", "; "), res["versions"]["torch"], res["versions"]["kernel"]),
         "", "GPU topology:", "```", res["versions"]["topology"], "```", "",
         "## Throughput, with and without specprof (alternated runs)", "",
         "| run | graphs | method | ok | tok/s | accept len | tokens | token hash | ranks agree |",
         "|---|---|---|---|---|---|---|---|---|"]
    for r in res["runs"]:
        L.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["id"], r["graphs"], r["method"], r["ok"], fmt(r["tok_s"], 1), fmt(r["accept_len"], 3), r["tokens"],
            r["token_hash"], r["tokens_equal_across_ranks"]))
    L += ["", "| graphs | plain tok/s (median) | specprof tok/s (median) | cost | tokens identical |", "|---|---|---|---|---|"]
    for g in sorted({r["graphs"] for r in res["runs"]}):
        p = [r["tok_s"] for r in res["runs"] if r["graphs"] == g and r["method"] == "plain" and r["ok"]]
        s = [r["tok_s"] for r in res["runs"] if r["graphs"] == g and r["method"] == "specprof" and r["ok"]]
        hashes = {r["token_hash"] for r in res["runs"] if r["graphs"] == g}
        cost = (1 - median(s) / median(p)) * 100 if p and s else None
        L.append("| %s | %s | %s | %s | %s |" % (g, fmt(median(p), 1), fmt(median(s), 1),
                                                  fmt(cost, 2, "%"), len(hashes) == 1))
    for g, perf in sorted((res.get("nccl_perf") or {}).items()):
        L += ["", "## all_reduce_perf-style reference (torch.distributed, bf16 sum, graphs %s run)" % g, "",
              "Eager: back-to-back `all_reduce` calls timed with CUDA events (includes the CPU's launch "
              "cost between operations). Graph: the same operations captured in one CUDA graph and "
              "replayed (GPU time per operation, all_reduce_perf -G).", "",
              "| bytes | iters | eager µs | eager busbw GB/s | graph µs | graph busbw GB/s |",
              "|---|---|---|---|---|---|"]
        for p in perf:
            L.append("| %d | %d | %.2f | %.2f | %s | %s |" % (p["bytes"], p["iters"], p["time_us"], p["busbw_gbps"],
                                                             fmt(p.get("graph_time_us"), 2),
                                                             fmt(p.get("graph_busbw_gbps"), 2)))
    for r in res["runs"]:
        if r["method"] != "specprof" or not r.get("cyc"):
            continue
        L += ["", "## specprof, %s" % r["id"], ""]
        for rank, d in sorted(r["cyc"].items()):
            share = d["verify_allreduce_share"]
            L.append("TP%s: %d cycles in the loop; verify GPU busy %.1f µs/cycle, of it all-reduce %.1f µs (%s); "
                     "straggler per cycle %s; median wait for the straggler %.1f µs/cycle" % (
                         rank, d["cycles"], d["verify_gpu_busy_us_per_cycle"], d["verify_allreduce_gpu_us_per_cycle"],
                         fmt(share * 100 if share is not None else None, 1, "%"),
                         {"TP%s" % k: v for k, v in sorted(d["straggler_cycles"].items())}, d["tp_wait_us_median"]))
            L += ["", "| phase | op | dtype | bytes | algo/proto | count | GPU µs (median) | busbw GB/s (median) | "
                      "reference busbw / µs (graph) | wait for last µs (median) | this rank last | compared on |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
            for c in d["collectives"]:
                ref = "%s / %s%s" % (fmt(c["nccl_perf_busbw_gbps"], 2), fmt(c["nccl_perf_us"], 2),
                                     "" if c.get("nccl_perf_kind") != "eager" else " (eager)") \
                    if c["nccl_perf_busbw_gbps"] else "—"
                clock = ", ".join("%s %d" % kv for kv in sorted((c.get("arrival_clock") or {}).items())) or "—"
                L.append("| %s | %s | %s | %s | %s/%s | %d | %.2f | %s | %s | %.2f | %d | %s |" % (
                    c["phase"], c["op"], c["dtype"], c["bytes"] or "unknown (graph replay)", c["algorithm"],
                    c["protocol"], c["count"], c["gpu_us_median"], fmt(c["busbw_gbps_median"], 2), ref,
                    c["wait_us_median"], c["last_arrivals"], clock))
            L.append("")
        if r.get("specprof_ranks"):
            L.append("report.json ranks: `%s`" % json.dumps(r["specprof_ranks"]))
    if res.get("jaeger"):
        L += ["", "## Jaeger", "", "`%s`" % json.dumps(res["jaeger"])]
    return "\n".join(L) + "\n"


def fmt(x, nd, suffix=""):
    if x is None:
        return "—"
    return ("%." + str(nd) + "f%s") % (x, suffix)


if __name__ == "__main__":
    main()
