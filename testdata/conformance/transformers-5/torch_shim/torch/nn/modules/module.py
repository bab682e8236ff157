"""Mirrors torch/nn/modules/module.py (torch 2.x): calling a module runs
Module._wrapped_call_impl -> Module._call_impl -> forward, so every model forward has those two
frames above it, as in torch. Loaded by file path (simtorch.load_shim), never importable as
`torch`, so it cannot shadow a real torch installation."""


class Module(object):
    def __init__(self):
        self.training = False
        self._compiled_call_impl = None

    def forward(self, *args, **kwargs):
        raise NotImplementedError("%s has no forward" % type(self).__name__)

    def _wrapped_call_impl(self, *args, **kwargs):
        # torch: the compiled path (torch.compile) when set, else _call_impl
        if self._compiled_call_impl is not None:
            return self._compiled_call_impl(*args, **kwargs)
        return self._call_impl(*args, **kwargs)

    def _call_impl(self, *args, **kwargs):
        # torch: the fast path when no hooks are registered
        forward_call = self.forward
        return forward_call(*args, **kwargs)

    __call__ = _wrapped_call_impl


class ModuleList(Module):
    def __init__(self, modules):
        Module.__init__(self)
        self._modules = list(modules)

    def __iter__(self):
        return iter(self._modules)

    def __len__(self):
        return len(self._modules)

    def __getitem__(self, i):
        return self._modules[i]
