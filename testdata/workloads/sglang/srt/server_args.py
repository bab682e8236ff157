"""Mirrors sglang/srt/server_args.py: the settings the miniature server runs with."""


class ServerArgs(object):
    def __init__(self, **kw):
        self.tp_rank = 0
        self.disable_cuda_graph = False
        self.speculative_algorithm = "EAGLE"
        self.speculative_num_steps = 3
        self.speculative_eagle_topk = 1
        self.speculative_num_draft_tokens = 4
        self.decode_log_interval = 50
        self.page_size = 1
        # Model shape (real SGLang reads these from the model config).
        self.num_hidden_layers = 4
        self.draft_num_hidden_layers = 1
        self.hidden_size = 4096
        self.max_total_num_tokens = 131072
        # Workload.
        self.batch_size = 1
        self.prompt_len = 1024
        self.num_cycles = 200
        self.seed = 0
        self.accept_prob = 0.7
        self.draft_sync = False
        # Test hook (not SGLang's): after this many decode steps, wait for pause_file to exist.
        self.pause_at_cycle = 0
        self.pause_file = None
        for k, v in kw.items():
            if not hasattr(self, k):
                raise TypeError("unknown server arg %r" % k)
            setattr(self, k, v)
        self.speculative_num_draft_tokens = self.speculative_num_steps * self.speculative_eagle_topk + 1
