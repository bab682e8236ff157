"""ctypes bindings of the CUDA driver API (libcuda.so.1) and NCCL (libnccl.so.2).

The libraries are loaded the way torch loads them: by soname, through the dynamic loader
(LD_LIBRARY_PATH), libcuda with RTLD_GLOBAL. Against specprof's stand-ins
(testdata/standin) they drive a simulated GPU; against a real driver they drive the real GPU
(the kernels are empty PTX kernels, so the workload also runs there).

Every driver/NCCL call is checked: a non-zero result raises RuntimeError naming the call.

Stand-in extensions (exported by the stand-in libcuda, looked up optionally, never hooked by the
profiler):
  simgpu_set_function_duration(CUfunction, uint64 ns)  kernel duration on the simulated GPU
  simgpu_set_tag(const char *)                          the calling thread's ground-truth tag
When they are missing (a real driver) the workload still runs: durations and tags are skipped.

`tag(phase)` is the oracle: a context manager that sets the calling thread's tag on entry and
restores the previous one on exit (a per-thread stack), so the stand-in writes, for every API
call, the phase the profiler must report for it.

Only the Python standard library is used; runs on CPython 3.10 .. 3.13.
"""

import contextlib
import ctypes
import os
import threading

c_int = ctypes.c_int
c_uint = ctypes.c_uint
c_void_p = ctypes.c_void_p
c_size_t = ctypes.c_size_t
c_char_p = ctypes.c_char_p
c_ulonglong = ctypes.c_ulonglong
c_uint64 = ctypes.c_uint64
byref = ctypes.byref

CU_STREAM_DEFAULT = 0
CU_STREAM_NON_BLOCKING = 1
CU_EVENT_DEFAULT = 0
CU_EVENT_DISABLE_TIMING = 2
CU_STREAM_CAPTURE_MODE_GLOBAL = 0
CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1
CU_STREAM_CAPTURE_MODE_RELAXED = 2

NCCL_BFLOAT16 = 9
NCCL_SUM = 0

LEGACY_STREAM = 0  # the NULL stream handle: torch's default stream


class Dim3(ctypes.Structure):
    """dim3 (cuda_runtime): passed by value to cudaLaunchKernel."""

    _fields_ = [("x", c_uint), ("y", c_uint), ("z", c_uint)]


class CUlaunchConfig(ctypes.Structure):
    """CUlaunchConfig (cuda.h): hStream at offset 32, attrs at 40, numAttrs at 48."""

    _fields_ = [
        ("gridDimX", c_uint),
        ("gridDimY", c_uint),
        ("gridDimZ", c_uint),
        ("blockDimX", c_uint),
        ("blockDimY", c_uint),
        ("blockDimZ", c_uint),
        ("sharedMemBytes", c_uint),
        ("hStream", c_void_p),
        ("attrs", c_void_p),
        ("numAttrs", c_uint),
    ]


assert CUlaunchConfig.hStream.offset == 32 and ctypes.sizeof(CUlaunchConfig) == 56


class ncclUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


assert ctypes.sizeof(ncclUniqueId) == 128


# --------------------------------------------------------------------------------------------
# Tags (the oracle) and per-thread call counts.

_tls = threading.local()
_set_tag_fn = None  # simgpu_set_tag once a stand-in libcuda is loaded
_tag_bytes = {}
_counts_lock = threading.Lock()
_all_counts = {}  # thread name -> {(tag, api): n}


def _state():
    st = getattr(_tls, "stack", None)
    if st is None:
        st = _tls.stack = []
        counts = _tls.counts = {}
        with _counts_lock:
            _all_counts[threading.current_thread().name] = counts
    return st


def _encode(phase):
    b = _tag_bytes.get(phase)
    if b is None:
        b = _tag_bytes[phase] = phase.encode()
    return b


def current_tag():
    st = _state()
    return st[-1] if st else ""


@contextlib.contextmanager
def tag(phase):
    """Label every API call this thread makes inside the block with `phase` (innermost wins)."""
    st = _state()
    prev = st[-1] if st else ""
    st.append(phase)
    if _set_tag_fn is not None and phase != prev:
        _set_tag_fn(_encode(phase))
    try:
        yield
    finally:
        st.pop()
        if _set_tag_fn is not None and phase != prev:
            _set_tag_fn(_encode(prev))


def truth_tag(phase, cycle=None, tid=None):
    """The ground-truth tag of a call (testdata/conformance/README.md): `phase` outside cycles,
    `phase@N` in cycle N of the calling thread, `phase@TID:N` in cycle N of thread TID."""
    if cycle is None:
        return phase
    if tid is None:
        return "%s@%d" % (phase, cycle)
    return "%s@%d:%d" % (phase, tid, cycle)


on_call = None  # optional hook on_call(api, tag), called at every checked call (presetcheck)


def _count(api):
    st = _state()
    t = st[-1] if st else ""
    key = (t, api)
    c = _tls.counts
    c[key] = c.get(key, 0) + 1
    if on_call is not None:
        on_call(api, t)


def call_counts():
    """{thread name: {tag: {api: n}}} of every checked call made through these bindings."""
    out = {}
    with _counts_lock:
        items = list(_all_counts.items())
    for name, counts in items:
        per = {}
        for (t, api), n in sorted(counts.items()):
            per.setdefault(t, {})[api] = n
        out[name] = per
    return out


# --------------------------------------------------------------------------------------------


class GraphExec(object):
    """Filled in when a `Cuda.capture` block ends: graph (CUgraph), handle (CUgraphExec)."""

    __slots__ = ("graph", "handle", "stream")

    def __init__(self, stream):
        self.graph = None
        self.handle = None
        self.stream = stream


class Cuda(object):
    """The CUDA driver API, one primary context on one device.

    `wrap`, when set (not None), is called as wrap(fn, *args) around every driver call made
    after initialisation that can block or launch; the workload installs a recursive helper there to put extra Python frames
    between its phase functions and each API call (--stack-depth).
    """

    def __init__(self, device=0, libname="libcuda.so.1", runtime=False):
        self.wrap = None
        self._cudaLaunchKernel = None
        try:
            self.lib = lib = ctypes.CDLL(libname, mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            raise RuntimeError("loading %s failed (%s); set LD_LIBRARY_PATH to the stand-in build "
                               "directory (make -C testdata/standin OUT=DIR)" % (libname, e))
        P = ctypes.POINTER

        def bind(name, *argtypes):
            f = getattr(lib, name)
            f.restype = c_int
            f.argtypes = list(argtypes)
            return f

        self._cuInit = bind("cuInit", c_uint)
        self._cuDeviceGet = bind("cuDeviceGet", P(c_int), c_int)
        self._cuDevicePrimaryCtxRetain = bind("cuDevicePrimaryCtxRetain", P(c_void_p), c_int)
        self._cuCtxSetCurrent = bind("cuCtxSetCurrent", c_void_p)
        self._cuModuleLoadData = bind("cuModuleLoadData", P(c_void_p), c_void_p)
        self._cuModuleGetFunction = bind("cuModuleGetFunction", P(c_void_p), c_void_p, c_char_p)
        self._cuStreamCreate = bind("cuStreamCreate", P(c_void_p), c_uint)
        self._cuMemAlloc_v2 = bind("cuMemAlloc_v2", P(c_ulonglong), c_size_t)
        self._cuMemcpyHtoD_v2 = bind("cuMemcpyHtoD_v2", c_ulonglong, c_void_p, c_size_t)
        self._cuMemcpyHtoDAsync_v2 = bind(
            "cuMemcpyHtoDAsync_v2", c_ulonglong, c_void_p, c_size_t, c_void_p)
        self._cuMemcpyDtoH_v2 = bind("cuMemcpyDtoH_v2", c_void_p, c_ulonglong, c_size_t)
        self._cuMemcpyDtoHAsync_v2 = bind(
            "cuMemcpyDtoHAsync_v2", c_void_p, c_ulonglong, c_size_t, c_void_p)
        self._cuMemcpyAsync = bind("cuMemcpyAsync", c_ulonglong, c_ulonglong, c_size_t, c_void_p)
        self._cuMemcpyHtoDAsync_v2 = bind(
            "cuMemcpyHtoDAsync_v2", c_ulonglong, c_void_p, c_size_t, c_void_p)
        self._cuMemcpyDtoDAsync_v2 = bind(
            "cuMemcpyDtoDAsync_v2", c_ulonglong, c_ulonglong, c_size_t, c_void_p)
        self._cuMemsetD32Async = bind("cuMemsetD32Async", c_ulonglong, c_uint, c_size_t, c_void_p)
        self._cuStreamSynchronize = bind("cuStreamSynchronize", c_void_p)
        self._cuEventCreate = bind("cuEventCreate", P(c_void_p), c_uint)
        self._cuEventRecord = bind("cuEventRecord", c_void_p, c_void_p)
        self._cuStreamWaitEvent = bind("cuStreamWaitEvent", c_void_p, c_void_p, c_uint)
        self._cuEventSynchronize = bind("cuEventSynchronize", c_void_p)
        self._cuEventElapsedTime = bind("cuEventElapsedTime", P(ctypes.c_float), c_void_p, c_void_p)
        self._cuLaunchKernel = bind(
            "cuLaunchKernel", c_void_p, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint,
            c_void_p, c_void_p, c_void_p)
        self._cuLaunchKernelEx = bind(
            "cuLaunchKernelEx", P(CUlaunchConfig), c_void_p, c_void_p, c_void_p)
        self._cuStreamBeginCapture_v2 = bind("cuStreamBeginCapture_v2", c_void_p, c_int)
        self._cuStreamEndCapture = bind("cuStreamEndCapture", c_void_p, P(c_void_p))
        self._cuGraphInstantiateWithFlags = bind(
            "cuGraphInstantiateWithFlags", P(c_void_p), c_void_p, c_ulonglong)
        self._cuGraphLaunch = bind("cuGraphLaunch", c_void_p, c_void_p)
        self._cuGetErrorName = None
        if hasattr(lib, "cuGetErrorName"):
            self._cuGetErrorName = bind("cuGetErrorName", c_int, P(c_char_p))

        # Stand-in extensions (optional).
        self._set_duration = None
        self.sim = False
        if hasattr(lib, "simgpu_set_function_duration"):
            self._set_duration = bind("simgpu_set_function_duration", c_void_p, c_uint64)
            self.sim = True
        if hasattr(lib, "simgpu_set_tag"):
            global _set_tag_fn
            f = lib.simgpu_set_tag
            f.restype = None
            f.argtypes = [c_char_p]
            _set_tag_fn = f
            st = _state()
            if st:  # tags entered before the library was loaded
                f(_encode(st[-1]))

        self._check("cuInit", self._cuInit(0))
        dev = c_int()
        self._check("cuDeviceGet", self._cuDeviceGet(byref(dev), device))
        self.device = dev.value
        ctx = c_void_p()
        self._check("cuDevicePrimaryCtxRetain", self._cuDevicePrimaryCtxRetain(byref(ctx), dev))
        self.ctx = ctx.value
        self.set_current()
        self._functions = {}
        self._ex_configs = {}
        if runtime:  # launches through the stand-in runtime, as PyTorch makes them
            if not hasattr(lib, "simgpu_runtime_enter"):
                raise RuntimeError("runtime launches need the stand-in libcuda.so.1 (the real runtime's "
                                   "cudaLaunchKernel takes a kernel's host stub, which this workload has not)")
            try:
                rt = ctypes.CDLL("libcudart.so.13")
            except OSError as e:
                raise RuntimeError("loading libcudart.so.13 failed (%s); build the stand-ins "
                                   "(make -C testdata/standin OUT=DIR)" % e)
            f = rt.cudaLaunchKernel
            f.restype = c_int
            f.argtypes = [c_void_p, Dim3, Dim3, c_void_p, c_size_t, c_void_p]
            self._cudaLaunchKernel = f

    # ---- helpers -----------------------------------------------------------------------------

    def _check(self, name, rc):
        _count(name)
        if rc != 0:
            desc = ""
            if self._cuGetErrorName is not None:
                s = c_char_p()
                if self._cuGetErrorName(rc, byref(s)) == 0 and s.value:
                    desc = s.value.decode(errors="replace") + " "
            raise RuntimeError("%s failed: %s(CUresult %d)" % (name, desc, rc))

    def set_current(self):
        """Makes the primary context current on the calling thread (each thread must)."""
        self._check("cuCtxSetCurrent", self._cuCtxSetCurrent(self.ctx))

    # ---- modules and functions ---------------------------------------------------------------

    def load_module(self, names):
        """Loads one module (PTX text) with an empty `.entry` kernel for each name."""
        lines = [".version 6.4", ".target sm_52", ".address_size 64", ""]
        for n in names:
            lines += [".visible .entry %s()" % n, "{", "\tret;", "}", ""]
        image = ctypes.create_string_buffer("\n".join(lines).encode())
        mod = c_void_p()
        self._check("cuModuleLoadData", self._cuModuleLoadData(byref(mod), image))
        for n in names:
            f = c_void_p()
            self._check("cuModuleGetFunction",
                        self._cuModuleGetFunction(byref(f), mod, n.encode()))
            self._functions[n] = f.value
        return mod.value

    def function(self, name, duration_us=None):
        """CUfunction of kernel `name` (loading a module for it when needed); sets its simulated
        duration when the stand-in is loaded and duration_us is given."""
        f = self._functions.get(name)
        if f is None:
            self.load_module([name])
            f = self._functions[name]
        if duration_us is not None:
            self.set_duration(f, int(round(duration_us * 1000.0)))
        return f

    def set_duration(self, f, ns):
        if self._set_duration is not None:
            rc = self._set_duration(f, ns)
            if rc != 0:
                raise RuntimeError("simgpu_set_function_duration failed: CUresult %d" % rc)

    # ---- streams, memory, events -------------------------------------------------------------

    def stream(self, flags=CU_STREAM_NON_BLOCKING):
        s = c_void_p()
        self._check("cuStreamCreate", self._cuStreamCreate(byref(s), flags))
        return s.value

    def alloc(self, nbytes):
        d = c_ulonglong()
        self._check("cuMemAlloc_v2", self._cuMemAlloc_v2(byref(d), nbytes))
        return d.value

    def htod(self, dptr, data, stream=None, sync=True):
        """Host-to-device copy of `data` (bytes, bytearray or a ctypes object).

        stream None: cuMemcpyHtoD_v2 (synchronous). Otherwise cuMemcpyHtoDAsync_v2 on `stream`,
        followed by cuStreamSynchronize when sync (what torch does for a copy from pageable host
        memory, e.g. torch.tensor(x, device="cuda")).
        """
        if self.wrap is None:
            return self._htod(dptr, data, stream, sync)
        return self.wrap(self._htod, dptr, data, stream, sync)

    def _htod(self, dptr, data, stream=None, sync=True):
        if isinstance(data, (bytes, bytearray)):
            buf = ctypes.create_string_buffer(bytes(data), len(data))
            n = len(data)
        else:
            buf = data
            n = ctypes.sizeof(data)
        if stream is None:
            self._check("cuMemcpyHtoD_v2", self._cuMemcpyHtoD_v2(dptr, byref(buf), n))
            return
        self._check("cuMemcpyHtoDAsync_v2", self._cuMemcpyHtoDAsync_v2(dptr, byref(buf), n, stream))
        if sync:
            self._check("cuStreamSynchronize", self._cuStreamSynchronize(stream))

    def htod_async(self, dptr, data, stream):
        """cuMemcpyHtoDAsync_v2 of `data` (a ctypes object) on `stream`: with pageable memory it
        returns once the source is staged, without waiting for the GPU (torch's
        .to('cuda', non_blocking=True) of a CPU tensor)."""
        self._check("cuMemcpyHtoDAsync_v2",
                    self._cuMemcpyHtoDAsync_v2(dptr, byref(data), ctypes.sizeof(data), stream))

    def dtod_async(self, dst, src, nbytes, stream):
        """cuMemcpyDtoDAsync_v2 on `stream` (torch's copy_ between device tensors, e.g. into a
        CUDA graph's static input buffers): never blocks."""
        self._check("cuMemcpyDtoDAsync_v2", self._cuMemcpyDtoDAsync_v2(dst, src, nbytes, stream))

    def memset_d32_async(self, dptr, value, count, stream):
        """cuMemsetD32Async on `stream` (torch's fill_ / zero_ of a buffer): never blocks."""
        self._check("cuMemsetD32Async", self._cuMemsetD32Async(dptr, value, count, stream))

    def dtoh(self, dst, dptr, stream=None, sync=True, generic=False):
        """Device-to-host copy into `dst` (a ctypes object or a bytearray).

        stream None: cuMemcpyDtoH_v2 (synchronous, legacy stream: the CPU blocks until the copy,
        and everything queued before it there, is done). Otherwise cuMemcpyDtoHAsync_v2 on
        `stream`, followed by cuStreamSynchronize when sync (what torch's .tolist() does).
        With generic, the async copy is cuMemcpyAsync (unified addressing: what torch's
        cudaMemcpyAsync makes). Host memory here is pageable: the async copy itself returns only
        once the copy is done, and the synchronisation after it finds the stream idle.
        """
        if self.wrap is None:
            return self._dtoh(dst, dptr, stream, sync, generic)
        return self.wrap(self._dtoh, dst, dptr, stream, sync, generic)

    def _dtoh(self, dst, dptr, stream, sync, generic=False):
        if isinstance(dst, bytearray):
            buf = (ctypes.c_char * len(dst)).from_buffer(dst)
        else:
            buf = dst
        n = ctypes.sizeof(buf)
        if stream is None:
            self._check("cuMemcpyDtoH_v2", self._cuMemcpyDtoH_v2(byref(buf), dptr, n))
            return
        if generic:
            self._check("cuMemcpyAsync", self._cuMemcpyAsync(ctypes.addressof(buf), dptr, n, stream))
        else:
            self._check("cuMemcpyDtoHAsync_v2", self._cuMemcpyDtoHAsync_v2(byref(buf), dptr, n, stream))
        if sync:
            self._check("cuStreamSynchronize", self._cuStreamSynchronize(stream))

    def sync(self, stream):
        if self.wrap is None:
            return self._sync(stream)
        return self.wrap(self._sync, stream)

    def _sync(self, stream):
        self._check("cuStreamSynchronize", self._cuStreamSynchronize(stream))

    def event(self, flags=CU_EVENT_DISABLE_TIMING):
        e = c_void_p()
        self._check("cuEventCreate", self._cuEventCreate(byref(e), flags))
        return e.value

    def event_record(self, ev, stream):
        if self.wrap is None:
            return self._event_record(ev, stream)
        return self.wrap(self._event_record, ev, stream)

    def _event_record(self, ev, stream):
        self._check("cuEventRecord", self._cuEventRecord(ev, stream))

    def stream_wait_event(self, stream, ev):
        """Work submitted to `stream` later waits for `ev` (cuStreamWaitEvent)."""
        if self.wrap is None:
            return self._stream_wait_event(stream, ev)
        return self.wrap(self._stream_wait_event, stream, ev)

    def _stream_wait_event(self, stream, ev):
        self._check("cuStreamWaitEvent", self._cuStreamWaitEvent(stream, ev, 0))

    def event_elapsed_ms(self, start, end):
        """cuEventElapsedTime: ms between two recorded, completed timing events."""
        ms = ctypes.c_float()
        self._check("cuEventElapsedTime", self._cuEventElapsedTime(byref(ms), start, end))
        return ms.value

    def event_sync(self, ev):
        if self.wrap is None:
            return self._event_sync(ev)
        return self.wrap(self._event_sync, ev)

    def _event_sync(self, ev):
        self._check("cuEventSynchronize", self._cuEventSynchronize(ev))

    # ---- launches ----------------------------------------------------------------------------

    def launch(self, fn, stream, ex=False, grid=(1, 1, 1), block=(128, 1, 1), shared=0):
        """Launches kernel `fn` with no parameters: cuLaunchKernel, or cuLaunchKernelEx (ex)."""
        if self.wrap is None:
            return self._launch(fn, stream, ex, grid, block, shared)
        return self.wrap(self._launch, fn, stream, ex, grid, block, shared)

    def _launch(self, fn, stream, ex, grid, block, shared):
        if not ex and self._cudaLaunchKernel is not None:
            self._check("cudaLaunchKernel", self._cudaLaunchKernel(
                fn, Dim3(*grid), Dim3(*block), None, shared, stream))
            return
        if not ex:
            self._check("cuLaunchKernel", self._cuLaunchKernel(
                fn, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared, stream,
                None, None))
            return
        key = (stream, grid, block, shared)
        cfg = self._ex_configs.get(key)
        if cfg is None:
            cfg = CUlaunchConfig(grid[0], grid[1], grid[2], block[0], block[1], block[2], shared,
                                 stream, None, 0)
            self._ex_configs[key] = cfg
        self._check("cuLaunchKernelEx", self._cuLaunchKernelEx(byref(cfg), fn, None, None))

    # ---- graphs ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def capture(self, stream, mode=CU_STREAM_CAPTURE_MODE_THREAD_LOCAL):
        """Stream capture: yields a GraphExec whose handle is set (instantiated) on exit."""
        g = GraphExec(stream)
        if self.wrap is None:
            self._begin_capture(stream, mode)
        else:
            self.wrap(self._begin_capture, stream, mode)
        ok = False
        try:
            yield g
            ok = True
        finally:
            graph = c_void_p()
            rc = self._cuStreamEndCapture(stream, byref(graph))
            if ok:
                self._check("cuStreamEndCapture", rc)
        g.graph = graph.value
        ex = c_void_p()
        self._check("cuGraphInstantiateWithFlags",
                    self._cuGraphInstantiateWithFlags(byref(ex), graph, 0))
        g.handle = ex.value

    def _begin_capture(self, stream, mode):
        self._check("cuStreamBeginCapture_v2", self._cuStreamBeginCapture_v2(stream, mode))

    def graph_launch(self, graph_exec, stream):
        if self.wrap is None:
            return self._graph_launch(graph_exec, stream)
        return self.wrap(self._graph_launch, graph_exec, stream)

    def _graph_launch(self, graph_exec, stream):
        self._check("cuGraphLaunch", self._cuGraphLaunch(graph_exec, stream))


class Nccl(object):
    """One NCCL communicator of `nranks` ranks (1 by default: no peer needed)."""

    def __init__(self, cuda=None, nranks=1, rank=0, libname="libnccl.so.2"):
        self.cuda = cuda
        try:
            self.lib = lib = ctypes.CDLL(libname)
        except OSError as e:
            raise RuntimeError("loading %s failed (%s); set LD_LIBRARY_PATH" % (libname, e))
        P = ctypes.POINTER

        def bind(name, *argtypes):
            f = getattr(lib, name)
            f.restype = c_int
            f.argtypes = list(argtypes)
            return f

        self._ncclGetUniqueId = bind("ncclGetUniqueId", P(ncclUniqueId))
        self._ncclCommInitRank = bind("ncclCommInitRank", P(c_void_p), c_int, ncclUniqueId, c_int)
        self._ncclAllReduce = bind(
            "ncclAllReduce", c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p, c_void_p)
        self._ncclGetErrorString = None
        if hasattr(lib, "ncclGetErrorString"):
            self._ncclGetErrorString = lib.ncclGetErrorString
            self._ncclGetErrorString.restype = c_char_p
            self._ncclGetErrorString.argtypes = [c_int]
        uid = ncclUniqueId()
        shared = os.environ.get("SPECPROF_DEMO_NCCL_UID")
        if shared and nranks > 1:
            # The ranks of one communicator share rank 0's id (SGLang passes it through its
            # TCP store; the demo's launcher through the environment).
            raw = bytes.fromhex(shared)
            ctypes.memmove(ctypes.addressof(uid), raw, min(len(raw), ctypes.sizeof(uid)))
        else:
            self._check("ncclGetUniqueId", self._ncclGetUniqueId(byref(uid)))
        comm = c_void_p()
        self._check("ncclCommInitRank", self._ncclCommInitRank(byref(comm), nranks, uid, rank))
        self.comm = comm.value
        self.nranks = nranks

    def _check(self, name, rc):
        _count(name)
        if rc != 0:
            desc = ""
            if self._ncclGetErrorString is not None:
                s = self._ncclGetErrorString(rc)
                if s:
                    desc = s.decode(errors="replace") + " "
            raise RuntimeError("%s failed: %s(ncclResult %d)" % (name, desc, rc))

    def allreduce(self, dptr, count, stream, dtype=NCCL_BFLOAT16, op=NCCL_SUM):
        """In-place all-reduce of `count` elements at dptr on `stream`."""
        wrap = self.cuda.wrap if self.cuda is not None else None
        if wrap is None:
            return self._allreduce(dptr, count, stream, dtype, op)
        return wrap(self._allreduce, dptr, count, stream, dtype, op)

    straggle_fn = None  # --straggle-us: a kernel this rank runs before every collective

    def _allreduce(self, dptr, count, stream, dtype, op):
        if self.straggle_fn is not None:
            # A straggling rank: its GPU reaches the collective late (a slower layer, say).
            self.cuda.launch(self.straggle_fn, stream)
        self._check("ncclAllReduce",
                    self._ncclAllReduce(dptr, dptr, count, dtype, op, self.comm, stream))
