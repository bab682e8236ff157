"""Which code do the driver entry points that libraries get from cuGetProcAddress run?

NCCL (and the CUDA runtime) do not call libcuda's exported symbols directly: they ask the driver
for function pointers (cuGetProcAddress / cudaGetDriverEntryPoint). A uprobe on an exported symbol
sees a call only if the pointer handed out is that symbol. This prints, for each entry point that
specprof hooks, what cuGetProcAddress returns for a few CUDA versions and flags: the exported
symbol it equals, or an offset into libcuda that no exported symbol starts at.
  python3 bench/gpu/procaddr_check.py
"""
import ctypes
import subprocess
import sys

NAMES = ["cuLaunchKernel", "cuLaunchKernelEx", "cuGraphLaunch", "cuStreamSynchronize", "cuEventSynchronize",
         "cuCtxSynchronize", "cuMemcpyDtoH", "cuMemcpyDtoHAsync", "cuStreamBeginCapture", "cuStreamEndCapture",
         "cuGraphInstantiateWithFlags", "cuEventRecord", "cuStreamWaitEvent"]
FLAGS = {0: "default", 1: "legacy-stream", 2: "per-thread-stream"}


def main():
    cu = ctypes.CDLL("libcuda.so.1")
    assert cu.cuInit(0) == 0
    path = None
    for line in open("/proc/self/maps"):
        if "libcuda.so" in line:
            path = line.split()[-1]
            base = int(line.split("-")[0], 16) - int(line.split()[2], 16)
            break
    # Exported symbols of libcuda, by address.
    out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True).stdout
    exports = {}
    for ln in out.splitlines():
        f = ln.split()
        if len(f) == 3 and f[1] in "Tt":
            exports.setdefault(int(f[0], 16) + base, []).append(f[2])
    print("libcuda:", path, "exports:", len(exports))
    gpa = cu.cuGetProcAddress_v2
    gpa.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_uint64,
                    ctypes.POINTER(ctypes.c_int)]
    for name in NAMES:
        for ver in (12000, 12080, 13000):
            for fl in (0, 2):
                pfn, st = ctypes.c_void_p(), ctypes.c_int()
                rc = gpa(name.encode(), ctypes.byref(pfn), ver, fl, ctypes.byref(st))
                if rc != 0 or not pfn.value:
                    print("%-28s v%d %-18s rc %d status %d" % (name, ver, FLAGS[fl], rc, st.value))
                    continue
                a = pfn.value
                what = ",".join(exports[a]) if a in exports else "NOT EXPORTED: libcuda+0x%x" % (a - base)
                print("%-28s v%d %-18s %s" % (name, ver, FLAGS[fl], what))
    # Which NCCL torch loads, and how it reaches the driver.
    try:
        import torch  # noqa
        torch.zeros(1, device="cuda")
        import torch.distributed  # noqa
    except Exception as e:  # noqa
        print("torch:", e)
    for line in open("/proc/self/maps"):
        if "nccl" in line and line.split()[-1].startswith("/"):
            p = line.split()[-1]
            und = subprocess.run(["nm", "-D", "--undefined-only", p], capture_output=True, text=True).stdout
            print("nccl:", p, "imports:", " ".join(sorted({l.split()[-1] for l in und.splitlines()
                                                            if "GetProcAddress" in l or "EntryPoint" in l or
                                                            l.split()[-1].startswith("cu")}))[:800])
            break


if __name__ == "__main__":
    sys.exit(main())
