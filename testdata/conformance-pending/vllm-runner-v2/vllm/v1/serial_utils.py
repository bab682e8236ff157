"""vllm/v1/serial_utils.py: run_method calls a worker method named by string (through
WorkerWrapperBase.__getattr__), by pickled function, or a callable."""

from functools import partial


def run_method(obj, method, args, kwargs):
    if isinstance(method, bytes):
        raise NotImplementedError("pickled methods are not used here")
    if isinstance(method, str):
        try:
            func = getattr(obj, method)
        except AttributeError:
            raise NotImplementedError("Method %r is not implemented." % (method,)) from None
    else:
        func = partial(method, obj)
    return func(*args, **kwargs)
