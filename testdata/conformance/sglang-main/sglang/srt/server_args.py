"""Mirrors sglang/srt/server_args.py: the settings this miniature server uses."""


class ServerArgs(object):
    def __init__(self, **kw):
        self.disable_cuda_graph = False
        self.speculative_num_steps = 3
        self.speculative_eagle_topk = 1
        self.num_hidden_layers = 2
        self.draft_num_hidden_layers = 1
        self.batch_size = 2
        self.num_cycles = 8
        for k, v in kw.items():
            if not hasattr(self, k):
                raise TypeError("unknown server arg %r" % k)
            setattr(self, k, v)
        self.speculative_num_draft_tokens = self.speculative_num_steps * self.speculative_eagle_topk + 1
