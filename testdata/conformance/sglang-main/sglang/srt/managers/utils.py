"""Mirrors sglang/srt/managers/utils.py (main): GenerationBatchResult.copy_to_cpu, called by the
overlap scheduler on its copy stream: non-blocking device-to-host copies of next_token_ids and
accept_lens, then copy_done.record(). process_batch_result_decode waits on copy_done one loop
iteration later."""


class GenerationBatchResult(object):
    def __init__(self, logits_output=None, next_token_ids=None, can_run_cuda_graph=False,
                 next_draft_input=None, accept_lens=None):
        self.logits_output = logits_output
        self.next_token_ids = next_token_ids
        self.can_run_cuda_graph = can_run_cuda_graph
        self.next_draft_input = next_draft_input
        self.accept_lens = accept_lens
        self.copy_done = None
        self.delay_sample_func = None
        self.extra_keep_alive_refs = None
        self.cycle = None  # oracle only: the cycle that produced this result

    def copy_to_cpu(self, gpu, host, dev, return_logprob=False, return_hidden_states=False):
        cuda = gpu.cuda
        cuda.dtoh(host, dev, stream=gpu.copy_stream, sync=False)  # next_token_ids.to("cpu", non_blocking=True)
        if self.accept_lens is not None:
            cuda.dtoh(host, dev, stream=gpu.copy_stream, sync=False)  # accept_lens likewise
        self.copy_done.record(gpu.copy_stream)


class Event(object):
    """torch.cuda.Event: the driver event is created lazily, at the first record."""

    def __init__(self, gpu):
        self.gpu = gpu
        self.handle = None

    def record(self, stream):
        if self.handle is None:
            self.handle = self.gpu.cuda.event()
        self.gpu.cuda.event_record(self.handle, stream)

    def synchronize(self):
        if self.handle is not None:
            self.gpu.cuda.event_sync(self.handle)
