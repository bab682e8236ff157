#!/usr/bin/env python3
"""code_reuse: a phase function whose code object takes the address of a freed module body.

A module body runs once and is freed after its import; a function imported later can be
allocated where it was. specprof learns a code object's class from its address, so the
function must not inherit the module body's class. This workload makes that happen on
purpose: it runs a module body that launches a kernel (so specprof classifies it), frees
it, then makes a copy of the same code named `step` (from reuse_step.py) until one lands on
the freed address, and runs that one. Calls are tagged (fakecuda.truth_tag): the module body's
launch `other`, every launch of the reused `step` `reuse.step`
(testdata/workloads/code_reuse.yaml).

    LD_LIBRARY_PATH=/tmp/sbuild SPECPROF_SIM_TRUTH=/tmp/t.jsonl python3 code_reuse.py

stdout: one JSON line {"reused": true|false, "tries": N, "pid": ...}; exit 1 when no
allocation landed on the freed address.
"""

import argparse
import json
import os
import sys
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import fakecuda  # noqa: E402
from fakecuda import tag, truth_tag  # noqa: E402

# The body of a module that launches at import time. Compiled as "exec", its code object is
# named <module>, as an imported module's is.
MODULE_SRC = "gpu.launch(fn, stream)\n"


def renamed(template, filename):
    """A copy of template named `step`, from filename: the same size as the module body's code
    object, and allocated with nothing else in between (keywords given literally: a ** call
    would allocate a dictionary first)."""
    if sys.version_info < (3, 11):
        return template.replace(co_name="step", co_filename=filename)
    return template.replace(co_name="step", co_qualname="step", co_filename=filename)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--settle", type=float, default=1.0, help="seconds between the module body's run and its free")
    args = p.parse_args()
    with tag(truth_tag("other")):
        gpu = fakecuda.Cuda()
        gpu.load_module(["reuse_kernel"])
        fn = gpu.function("reuse_kernel", duration_us=5.0)
        stream = fakecuda.LEGACY_STREAM
    env = {"gpu": gpu, "fn": fn, "stream": stream}
    module_file = os.path.join(HERE, "reuse_module.py")
    step_file = os.path.join(HERE, "reuse_step.py")
    keep = []  # misses stay alive, so that they do not take the freed block back
    step = None
    tries = 0
    while step is None and tries < 50:
        tries += 1
        body = compile(MODULE_SRC, module_file, "exec")
        template = compile(MODULE_SRC, module_file, "exec")
        with tag(truth_tag("other")):
            exec(body, env)  # specprof classifies the module body here
            gpu.sync(stream)
        # specprof reads a new code object's name when the call's record
        # reaches it, which takes milliseconds: the module body must still be
        # there then. (A code object freed before that is a case of its own.)
        time.sleep(args.settle)
        freed = id(body)
        del body
        for _ in range(8):
            code = renamed(template, step_file)
            if id(code) == freed:
                step = code
                break
            keep.append(code)
        keep.append(template)
    if step is not None:
        with tag(truth_tag("reuse.step")):
            for _ in range(20):
                exec(step, env)
        with tag(truth_tag("other")):
            gpu.sync(stream)
        # And it reads them before the interpreter's exit frees them.
        time.sleep(args.settle)
    print(json.dumps({"reused": step is not None, "tries": tries, "pid": os.getpid()}), flush=True)
    return 0 if step is not None else 1


if __name__ == "__main__":
    sys.exit(main())
