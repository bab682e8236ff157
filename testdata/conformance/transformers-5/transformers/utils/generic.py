"""transformers/utils/generic.py: the decorators on model forwards, each one more Python frame
(`<decorator>.<locals>.wrapper`) between Module._call_impl and forward."""

import functools


def can_return_tuple(func):
    @functools.wraps(func)
    def wrapper(self, *args, **kwargs):
        return_dict = kwargs.pop("return_dict", True)
        output = func(self, *args, **kwargs)
        return output if return_dict is not False else output.to_tuple()

    return wrapper


def merge_with_config_defaults(func):
    @functools.wraps(func)
    def wrapper(self, *args, **kwargs):
        if kwargs.get("use_cache") is None:
            kwargs["use_cache"] = self.config.use_cache
        return func(self, *args, **kwargs)

    return wrapper
