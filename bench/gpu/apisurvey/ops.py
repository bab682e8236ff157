"""The torch operations whose CUDA driver entry points bench/gpu/apisurvey surveys.

Each operation runs --reps times in its own section (the "@@section NAME" protocol of
apisurvey's doc.go), after a matmul that keeps the GPU busy for a while, so that a call that
waits for the GPU shows it as time inside the call. --profile instead runs each operation under
torch.profiler (CUPTI through kineto) and prints, per operation, the CUDA runtime calls and the
GPU copies and sets it saw: CUPTI's view of the same operations.
"""

import argparse
import sys

import torch


def ops(dev):
    a = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
    busy = lambda: a @ a  # about 0.15 ms on an H200: the GPU is busy when the op is issued
    small = torch.arange(8, device=dev)
    dst = torch.empty_like(small)
    host = torch.arange(8)
    pinned = torch.arange(8).pin_memory()
    fbuf = torch.empty(1 << 16, device=dev)
    ev = torch.cuda.Event()
    st = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    # An EAGLE-like accept: a graph replay, then .tolist() of its output.
    gin = torch.zeros(8, device=dev)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        gout = (gin + 1).cumsum(0).to(torch.int64)
    torch.cuda.synchronize()

    def on_side():
        with torch.cuda.stream(side):
            busy()
            small.tolist()

    def event_sync():
        busy()
        ev.record()
        ev.synchronize()

    return [
        ("idle", lambda: None),
        ("busy (the matmul alone)", busy),
        ("tolist", lambda: (busy(), small.tolist())),
        ("item", lambda: (busy(), small[0].item())),
        ("cpu", lambda: (busy(), small.cpu())),
        ("cpu non_blocking to pinned", lambda: (busy(), pinned.copy_(small, non_blocking=True))),
        ("to cuda (HtoD pageable)", lambda: (busy(), host.to(dev))),
        ("to cuda non_blocking (HtoD pinned)", lambda: (busy(), pinned.to(dev, non_blocking=True))),
        ("copy_ DtoD", lambda: (busy(), dst.copy_(small))),
        ("zero_", lambda: (busy(), fbuf.zero_())),
        ("fill_(1.5)", lambda: (busy(), fbuf.fill_(1.5))),
        ("torch.zeros on cuda", lambda: (busy(), torch.zeros(1 << 16, device=dev))),
        ("torch.cuda.synchronize", lambda: (busy(), torch.cuda.synchronize())),
        ("Event.synchronize", event_sync),
        ("Stream.synchronize", lambda: (busy(), st.synchronize())),
        ("side stream tolist", on_side),
        ("graph replay + tolist", lambda: (busy(), g.replay(), gout.tolist())),
    ]


def marker(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
    if sys.stdin.readline() == "":
        raise SystemExit("apisurvey went away")


def survey(reps):
    table = ops("cuda")
    for _, fn in table:  # warm up: first-call allocations and module loads stay out
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    for name, fn in table:
        marker("@@section %s (x%d)" % (name, reps))
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()  # its own section's synchronize: counted, reps + 1 calls at most
    marker("@@end")


def profile(reps):
    from torch.profiler import ProfilerActivity, profile as tprofile
    table = ops("cuda")
    for _, fn in table:
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    for name, fn in table:
        with tprofile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
            for _ in range(reps):
                fn()
            torch.cuda.synchronize()
        rows = {}
        for e in p.events():
            n = e.name
            if n.startswith("cuda") or n.startswith("cu") or n.startswith("Memcpy") or n.startswith("Memset"):
                r = rows.setdefault(n, [0, 0.0])
                r[0] += 1
                r[1] += e.device_time if n.startswith("Mem") else e.cpu_time
        print("## %s (x%d)" % (name, reps))
        for n, (c, us) in sorted(rows.items()):
            print("  %-56s %6d %12.1f us" % (n, c, us))
        sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--profile", action="store_true", help="CUPTI's view through torch.profiler")
    args = ap.parse_args()
    print("torch", torch.__version__, "cuda", torch.version.cuda, file=sys.stderr)
    if args.profile:
        profile(args.reps)
    else:
        survey(args.reps)


if __name__ == "__main__":
    main()
