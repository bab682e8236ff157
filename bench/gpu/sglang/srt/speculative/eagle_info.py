"""Mirrors sglang/srt/speculative/eagle_info.py: EagleVerifyInput.verify, the acceptance step
(greedy, topk 1): compare the K draft tokens with the target's predictions, keep the longest
matching prefix plus the target's bonus token, update the worker's state on the GPU, and read
the accepted tokens back to the host (.tolist(): a device-to-host copy and a blocking sync,
like SGLang's accept_index/accept_length .tolist())."""

import time

import torch


class EagleVerifyOutput:
    __slots__ = ("accept_length", "accepted_ids")

    def __init__(self, accept_length, accepted_ids):
        self.accept_length = accept_length    # accepted draft tokens + 1 (the bonus token)
        self.accepted_ids = accepted_ids      # host list, accept_length tokens


class EagleVerifyInput:
    def __init__(self, draft_token, spec_steps):
        self.draft_token = draft_token        # [K+1]: the last verified token, then K drafts
        self.spec_steps = spec_steps

    def verify(self, worker, predict):
        """predict: [K+1] the target's greedy token after each of draft_token."""
        draft = self.draft_token
        match = (draft[1:] == predict[:-1]).to(torch.int64)
        accepted = torch.cumprod(match, dim=0).sum()              # 0..K accepted drafts
        # Draft-extend input: the verified tokens and their positions (static buffers).
        worker.extend_ids.copy_(predict)
        torch.add(worker.positions, worker.arange_plus1, out=worker.extend_positions)
        # Next cycle: last verified token = the bonus token, position advanced.
        worker.verified_id.copy_(predict.gather(0, accepted.view(1)))
        worker.positions.add_(accepted + 1)
        both = torch.cat([accepted.view(1), predict])
        if worker.tolist_ns is None:
            host = both.tolist()                                      # blocking D2H copy
        else:  # --time-tolist: the blocking copy's wall time, the truth for specprof's sync wait
            t0 = time.monotonic_ns()
            host = both.tolist()
            worker.tolist_ns.append(time.monotonic_ns() - t0)
        n = int(host[0])
        return EagleVerifyOutput(n + 1, host[1:n + 2])
