"""Mirrors sglang/srt/managers/overlap_utils.py (main): FutureMap, the device ring that relays
one iteration's outputs (bonus tokens, draft state, seq lens) to the next one's inputs."""


class FutureMap(object):
    def __init__(self, gpu):
        self.gpu = gpu

    def resolve_seq_lens_cpu(self, batch):
        return

    def publish(self, future_indices, new_seq_lens):
        self.gpu.launch("copy_next_token_ids", 1)  # new_seq_lens into the ring

    def stash(self, future_indices, payload):
        self.gpu.launch("copy_next_token_ids", 1)  # payload tensors into the ring


def resolve_forward_inputs(batch, future_map):
    if batch.forward_mode != 1:
        batch.gpu.launch("copy_next_token_ids", batch.batch_size())  # gather from the ring
