"""set_proctitle as setproctitle does it (comm via prctl, the argv area rewritten in place);
the same as testdata/workloads/sglang_demo.py's, without importing the demo's package."""

import ctypes
import sys


def set_proctitle(title):
    raw = title.encode()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(15, ctypes.c_char_p(raw[:15]), 0, 0, 0)
    except Exception as e:  # pragma: no cover
        sys.stderr.write("workload: prctl(PR_SET_NAME): %s\n" % e)
    try:
        with open("/proc/self/stat") as f:
            stat = f.read()
        fields = stat[stat.rindex(")") + 2:].split()
        arg_start, arg_end = int(fields[45]), int(fields[46])
        size = arg_end - arg_start
        if size > 1:
            ctypes.memmove(arg_start, raw[:size - 1].ljust(size, b"\0"), size)
    except Exception as e:  # pragma: no cover
        sys.stderr.write("workload: rewriting argv: %s\n" % e)
