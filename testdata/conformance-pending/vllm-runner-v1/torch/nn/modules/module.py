"""torch/nn/modules/module.py: calling a module runs _wrapped_call_impl -> _call_impl ->
forward."""


class Module(object):
    def forward(self, *args, **kwargs):
        raise NotImplementedError

    def _wrapped_call_impl(self, *args, **kwargs):
        return self._call_impl(*args, **kwargs)

    def _call_impl(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    __call__ = _wrapped_call_impl
