#!/usr/bin/env python3
"""A server that only logs: one SGLang "Decode batch" line per cycle on
stdout, a line on stderr every --stderr-every cycles, and its token count
at the end. Its output depends on its flags alone (no time, no pid), so a
test can compare a traced run's output byte for byte with an untraced one.

It makes no CUDA call: it stands for the log side of a server, for the
tests of how `specprof run` passes the target's output through.

--progress PATH: after each cycle's lines are written, the number of
cycles done is written at the start of PATH (fixed width), and "done"
once the last line is out, so a test can tell how far the workload got
while specprof was stopped or dead.
"""
import argparse
import os
import sys
import time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--cycles", type=int, default=100)
    p.add_argument("--sleep-ms", type=float, default=0.0, help="pause after each cycle")
    p.add_argument("--pad", type=int, default=0, help="characters of padding in every line")
    p.add_argument("--stderr-every", type=int, default=10, help="a stderr line every N cycles (0: none)")
    p.add_argument("--progress", metavar="PATH")
    a = p.parse_args()

    prog = os.open(a.progress, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) if a.progress else None
    pad = "x" * a.pad
    tokens = 0
    for i in range(a.cycles):
        accept = 1.0 + (i % 4) * 0.5  # 1.0, 1.5, 2.0, 2.5: mean 1.75 over whole groups of four
        tokens += int(accept * 2)
        print(f"[TP0] Decode batch, #running-req: 1, #token: {tokens}, accept len: {accept:.2f}, "
              f"gen throughput (token/s): {100 + i % 7:.2f}, #queue-req: 0, pad: {pad}", flush=True)
        if a.stderr_every and (i + 1) % a.stderr_every == 0:
            print(f"[TP0] cycle {i + 1} of {a.cycles}", file=sys.stderr, flush=True)
        if prog is not None:
            os.pwrite(prog, f"{i + 1:12d}\n".encode(), 0)
        if a.sleep_ms:
            time.sleep(a.sleep_ms / 1000)
    print(f"tokens: {tokens}", flush=True)
    if prog is not None:
        os.pwrite(prog, f"{'done':>12}\n".encode(), 0)


if __name__ == "__main__":
    main()
