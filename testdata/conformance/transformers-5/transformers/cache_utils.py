"""transformers/cache_utils.py (5.x): a Cache is a list of per-layer objects; DynamicLayer
grows by torch.cat in update() and is rolled back in crop() by slicing, which makes views
only: no kernel, no copy."""

import simtorch


class DynamicLayer(object):
    is_croppable = True

    def __init__(self):
        self.is_initialized = False
        self.length = 0

    def update(self, key_states, value_states, cache_kwargs=None):
        if not self.is_initialized:
            # lazy_initialization: empty device tensors (no data to copy)
            self.is_initialized = True
        # self.keys = torch.cat([self.keys, key_states], dim=-2), same for values
        simtorch.DEV.k("cat", 2)
        self.length += key_states
        return self.length

    def get_seq_length(self):
        return self.length if self.is_initialized else 0

    def crop(self, max_length):
        if max_length < 0:
            max_length = self.get_seq_length() - abs(max_length)
        if self.get_seq_length() <= max_length:
            return
        # self.keys = self.keys[..., :max_length, :] (a view), same for values
        self.length = max_length


class Cache(object):
    def __init__(self, layers):
        self.layers = layers

    def update(self, key_states, value_states, layer_idx, cache_kwargs=None):
        while len(self.layers) <= layer_idx:
            self.layers.append(DynamicLayer())
        return self.layers[layer_idx].update(key_states, value_states, cache_kwargs)

    def get_seq_length(self, layer_idx=0):
        if layer_idx >= len(self.layers):
            return 0
        return self.layers[layer_idx].get_seq_length()

    def crop(self, max_length):
        for layer in self.layers:
            layer.crop(max_length)


class DynamicCache(Cache):
    def __init__(self, config=None):
        Cache.__init__(self, [])
