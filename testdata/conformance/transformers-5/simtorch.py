"""What the transformers-shaped code below needs of torch, on the simulated GPU.

Tensors carry a small host-side mirror of their value (`host`) so that the generation code can
run its real control flow (how many tokens match, when to stop); every operation makes the CUDA
driver calls the torch operation makes in eager mode on the legacy default stream:

  elementwise / reduction / indexing op   one cuLaunchKernel each
  linear layer (cuBLAS)                   cuLaunchKernelEx
  bool(t), int(t) (__index__), .item(),   cuMemcpyDtoHAsync_v2 + cuStreamSynchronize
  .tolist()                               (at::cuda::memcpy_and_sync, a pageable host buffer)
  torch.tensor(x, device="cuda")          cuMemcpyHtoDAsync_v2 + cuStreamSynchronize

This module is simulation machinery, not part of the mirrored transformers code: its frames
(file simtorch.py) match no preset rule, as torch's C++ code has no Python frames at all.

The shim files under torch_shim/ (torch/nn/modules/module.py, torch/utils/_contextlib.py,
torch/autograd/grad_mode.py) are loaded by file path, so their code objects carry torch's file
names while no module named `torch` is ever created.
"""

import ctypes
import importlib.util
import os
import threading

import fakecuda

HERE = os.path.dirname(os.path.abspath(__file__))
LEGACY = fakecuda.LEGACY_STREAM

# ---------------------------------------------------------------------------------------------
# torch shims


def _load(relpath, name):
    path = os.path.join(HERE, "torch_shim", relpath)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_module = _load("torch/nn/modules/module.py", "_tfconf_torch_nn_modules_module")
_contextlib = _load("torch/utils/_contextlib.py", "_tfconf_torch_utils_contextlib")
_grad_mode = _load("torch/autograd/grad_mode.py", "_tfconf_torch_autograd_grad_mode")


class nn(object):
    """torch.nn: Module, ModuleList, Linear, Embedding (torch/nn/modules/*.py)."""
    Module = _module.Module
    ModuleList = _module.ModuleList
    Linear = None
    Embedding = None


no_grad = _grad_mode.make_no_grad(_contextlib._DecoratorContextManager)

_linear = _load("torch/nn/modules/linear.py", "_tfconf_torch_nn_modules_linear")
nn.Linear = _linear.Linear
nn.Embedding = _linear.Embedding

# ---------------------------------------------------------------------------------------------
# the device

# kernel name -> duration multiplier of --kernel-us; names after the ATen / cuBLAS / SDPA symbols
KERNELS = {
    "fill": ("vectorized_elementwise_kernel_FillFunctor", 0.25),
    "copy": ("vectorized_elementwise_kernel_copy", 0.25),
    "binary": ("vectorized_elementwise_kernel_BinaryFunctor", 0.25),
    "compare": ("vectorized_elementwise_kernel_CompareFunctor", 0.25),
    "cat": ("CatArrayBatchedCopy", 0.25),
    "index": ("index_elementwise_kernel", 0.25),
    "reduce": ("reduce_kernel", 0.25),
    "scan": ("tensor_kernel_scan_innermost_dim", 0.25),
    "softmax": ("cunn_SoftMaxForward", 0.5),
    "multinomial": ("sampleMultinomialOnce", 0.5),
    "rand": ("distribution_elementwise_grid_stride_kernel", 0.25),
    "topk": ("gatherTopK", 0.5),
    "sort": ("radixSortKVInPlace", 0.5),
    "scatter": ("scatter_gather_elementwise_kernel", 0.25),
    "embedding": ("indexSelectLargeIndex", 1.0),
    "norm": ("vectorized_elementwise_kernel_rms", 1.0),
    "rope": ("vectorized_elementwise_kernel_rope", 1.0),
    "attention": ("pytorch_flash::flash_fwd_kernel", 2.0),
    "act": ("vectorized_elementwise_kernel_silu_mul", 1.0),
}
GEMMS = {
    "qkv": "nvjet_hsh_qkv_proj",
    "o_proj": "nvjet_hsh_o_proj",
    "gate_up": "nvjet_hsh_gate_up_proj",
    "down": "nvjet_hsh_down_proj",
    "lm_head": "nvjet_hsh_lm_head",
}

DEV = None


class Device(object):
    """The CUDA device the model runs on: one context, the legacy default stream."""

    def __init__(self, cuda, kernel_us):
        self.cuda = cuda
        cuda.load_module([sym for sym, _ in KERNELS.values()] + list(GEMMS.values()))
        self.fn = {k: cuda.function(sym, kernel_us * m) for k, (sym, m) in KERNELS.items()}
        self.gemm_fn = {k: cuda.function(sym, kernel_us * 3.0) for k, sym in GEMMS.items()}
        self.scratch = cuda.alloc(1 << 16)
        self._host = ctypes.create_string_buffer(64)

    def k(self, name, n=1):
        fn = self.fn[name]
        for _ in range(n):
            self.cuda.launch(fn, LEGACY)

    def gemm(self, name):
        self.cuda.launch(self.gemm_fn[name], LEGACY, ex=True)

    def d2h(self):
        self.cuda.dtoh(self._host, self.scratch, stream=LEGACY, sync=True)

    def h2d(self):
        self.cuda.htod(self.scratch, self._host, stream=LEGACY, sync=True)


def init(cuda, kernel_us):
    global DEV
    DEV = Device(cuda, kernel_us)
    return DEV


class Tensor(object):
    """A CUDA tensor: its shape and a host mirror of its value. Converting it to a Python value
    (bool, int, item, tolist) copies it to the host and waits, as torch does."""

    __slots__ = ("host", "shape")

    def __init__(self, host, shape=(1,)):
        self.host = host
        self.shape = tuple(shape)

    def __bool__(self):
        DEV.d2h()
        return bool(self.host)

    def __index__(self):
        DEV.d2h()
        return int(self.host)

    __int__ = __index__

    def item(self):
        DEV.d2h()
        return self.host

    def tolist(self):
        DEV.d2h()
        return list(self.host)

    def to(self, *args, **kwargs):
        # same device: no copy; a dtype cast (or copy=True) is one copy kernel
        if kwargs.get("dtype") is not None or kwargs.get("copy"):
            DEV.k("copy")
            return Tensor(self.host, self.shape)
        return self

    def clone(self):
        DEV.k("copy")
        return Tensor(self.host, self.shape)

    # elementwise operators on 0-d / small tensors: one kernel each
    def _bin(self, other, f, kind="binary"):
        DEV.k(kind)
        o = other.host if isinstance(other, Tensor) else other
        return Tensor(f(self.host, o), self.shape)

    def __add__(self, o):
        return self._bin(o, lambda a, b: a + b)

    def __sub__(self, o):
        return self._bin(o, lambda a, b: a - b)

    def __rsub__(self, o):
        return self._bin(o, lambda a, b: b - a)

    def __eq__(self, o):
        return self._bin(o, lambda a, b: a == b, "compare")

    def __ne__(self, o):
        return self._bin(o, lambda a, b: a != b, "compare")

    def __lt__(self, o):
        return self._bin(o, lambda a, b: a < b, "compare")

    def __gt__(self, o):
        return self._bin(o, lambda a, b: a > b, "compare")

    def __or__(self, o):
        return self._bin(o, lambda a, b: bool(a) or bool(b))

    def __and__(self, o):
        return self._bin(o, lambda a, b: bool(a) and bool(b))

    def __invert__(self):
        DEV.k("binary")
        return Tensor(not self.host, self.shape)

    __hash__ = object.__hash__


def full(shape, value):
    """torch.full / torch.ones / torch.zeros / new_ones on the device: one fill kernel."""
    DEV.k("fill")
    return Tensor(value, shape)


def tensor(value):
    """torch.tensor(python value, device="cuda"): a pageable host-to-device copy."""
    DEV.h2d()
    return Tensor(value)


def cat(tensors, host):
    DEV.k("cat")
    return Tensor(host, (1, len(host)) if isinstance(host, list) else (1,))


# ---------------------------------------------------------------------------------------------
# the toy weights: which token each model predicts, decided by position, so the generation
# code's own control flow (matches, stops) gives the cycle structure. Not transformers code.

EOS = 2
VOCAB = 32000


def _u(seed, *xs):
    """Deterministic uniform in [0, 1) from integers (splitmix64)."""
    h = (seed * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    for x in xs:
        h = (h ^ (x + 0x9E3779B97F4A7C15 + (h << 6) + (h >> 2))) & 0xFFFFFFFFFFFFFFFF
    h ^= h >> 30
    h = (h * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    h ^= h >> 27
    h = (h * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    h ^= h >> 31
    return (h >> 11) / float(1 << 53)


class Oracle(object):
    """seed, accept_prob: the assistant predicts the target's token with this probability;
    confidence_stop: probability that the assistant's confidence falls under its threshold at
    a drafted token; stop_after: the target predicts EOS everywhere in its stop_after-th
    forward (so generation ends with that cycle)."""

    def __init__(self, seed, accept_prob, confidence_stop, stop_after):
        self.seed = seed
        self.accept_prob = accept_prob
        self.confidence_stop = confidence_stop
        self.stop_after = stop_after

    def target_token(self, pos):
        return 10 + int(_u(self.seed, 1, pos) * (VOCAB - 10))

    def next_tokens(self, role, positions, forward_no):
        """Token predicted after each input position, for the target or the assistant."""
        out = []
        for p in positions:
            t = self.target_token(p + 1)
            if role == "target":
                if self.stop_after and forward_no >= self.stop_after:
                    t = EOS
            elif _u(self.seed, 2, p + 1) >= self.accept_prob:
                t = 10 + (t - 10 + 1) % (VOCAB - 10)
            out.append(t)
        return out

    def confidence(self, pos):
        return 0.1 if _u(self.seed, 3, pos) < self.confidence_stop else 0.9


ORACLE = None

# ---------------------------------------------------------------------------------------------
# ground truth: cycles are numbered from 1 per thread, in the order they run

_tls = threading.local()


def next_cycle():
    n = getattr(_tls, "cycles", 0) + 1
    _tls.cycles = n
    return n


def cycles_run():
    return getattr(_tls, "cycles", 0)


class Ids(Tensor):
    """A (1, n) integer tensor of token ids (host: the list). Slicing makes a view, no kernel;
    a tensor used as a slice bound is converted with __index__ (a copy back and a wait)."""

    __slots__ = ()

    def __init__(self, host):
        Tensor.__init__(self, list(host), (1, len(host)))

    def __getitem__(self, key):
        import operator
        if not (isinstance(key, tuple) and len(key) == 2 and isinstance(key[1], slice)):
            raise TypeError("Ids supports t[:, a:b] only")
        s = key[1]
        start = None if s.start is None else operator.index(s.start)
        stop = None if s.stop is None else operator.index(s.stop)
        return Ids(self.host[start:stop])

    def __len__(self):
        return len(self.host)


def cat_ids(parts):
    """torch.cat((a, b), dim=-1) of token tensors: one kernel."""
    DEV.k("cat")
    out = []
    for p in parts:
        out.extend(p.host)
    return Ids(out)


def any_(t):
    """t.any(): a reduction kernel, the result stays on the device."""
    DEV.k("reduce")
    return Tensor(bool(t.host))
