"""Mirrors the decode path of sglang/srt/speculative/eagle_worker.py (EAGLEWorker, spec v1, topk 1,
batch 1) with a real torch draft/target pair (bench/gpu/speclm.py).

One call of forward_batch_generation is one speculative cycle, as in SGLang:
    draft                               K draft steps: one CUDA graph replay
                                        (EAGLEDraftCudaGraphRunner.replay) or eager draft_forward
    verify                              target forward over K+1 tokens (TpModelWorker ->
                                        CudaGraphRunner.replay or eager), then the acceptance,
                                        EagleVerifyInput.verify, which reads the accepted tokens
                                        back to the host (a blocking copy)
    forward_draft_extend_after_decode   the draft model over the verified tokens (graph replay
                                        EAGLEDraftExtendCudaGraphRunner.replay, or eager)
specprof's sglang-eagle preset names these phases from the qualified names and this file's path
(.../sglang/srt/speculative/eagle_worker.py). The phase timers of the benchmark's other methods
(self.phases, bench/gpu/benchphase.py) do nothing unless a --timing mode is chosen.
"""

import torch

from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.speculative.eagle_draft_cuda_graph_runner import EAGLEDraftCudaGraphRunner
from sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner import (
    EAGLEDraftExtendCudaGraphRunner,
)
from sglang.srt.speculative.eagle_info import EagleVerifyInput


class EAGLEWorker:
    def __init__(self, draft_model, target_model, speculative_num_steps, phases, first_token=1,
                 device="cuda"):
        self.draft_model = draft_model
        self.target_worker = TpModelWorker(target_model)
        self.speculative_num_steps = k = speculative_num_steps
        self.phases = phases
        self.first_token = first_token
        long = dict(dtype=torch.long, device=device)
        # Static buffers (the CUDA graphs read and write these).
        self.verified_id = torch.zeros(1, **long)        # last verified token
        self.positions = torch.zeros(1, **long)          # its position
        self.draft_tokens = torch.zeros(k + 1, **long)   # [verified_id, d1..dK]
        self.draft_positions = torch.zeros(k + 1, **long)
        self.arange = torch.arange(k + 1, **long)
        self.arange_plus1 = self.arange + 1
        self.extend_ids = torch.zeros(k + 1, **long)     # verified tokens (target predictions)
        self.extend_positions = torch.zeros(k + 1, **long)
        self.extend_out = torch.zeros(k + 1, **long)
        self.draft_graph_runner = None
        self.draft_extend_graph_runner = None
        self.output_ids = []
        self.accept_lengths = []
        self.tolist_ns = None  # spec_loop.py --time-tolist: a list of each accept's .tolist() time

    def init_cuda_graphs(self):
        self.draft_graph_runner = EAGLEDraftCudaGraphRunner(self)
        self.target_worker.init_cuda_graphs(self.draft_tokens, self.draft_positions)
        self.draft_extend_graph_runner = EAGLEDraftExtendCudaGraphRunner(self)

    def reset(self):
        """Initial state (after graph capture, whose warm-up ran the graphs' code)."""
        self.verified_id.fill_(self.first_token)
        self.positions.zero_()
        self.extend_ids.zero_()
        self.extend_positions.zero_()
        self.output_ids = []
        self.accept_lengths = []

    def forward_batch_generation(self):
        self.draft()
        res = self.verify()
        self.forward_draft_extend_after_decode()
        self.output_ids.extend(res.accepted_ids)
        self.accept_lengths.append(res.accept_length)
        return res.accept_length

    def draft(self):
        with self.phases.span("spec.draft"):
            if self.draft_graph_runner is not None:
                self.draft_graph_runner.replay()
            else:
                self.draft_forward()

    def draft_forward(self):
        """K greedy draft steps from the last verified token (captured whole in a graph)."""
        self.draft_tokens[0:1].copy_(self.verified_id)
        torch.add(self.positions, self.arange, out=self.draft_positions)
        tok = self.verified_id
        for i in range(self.speculative_num_steps):
            tok = self.draft_model.greedy(tok, self.draft_positions[i:i + 1])
            self.draft_tokens[i + 1:i + 2].copy_(tok)

    def verify(self):
        with self.phases.span("spec.verify"):
            spec_info = EagleVerifyInput(self.draft_tokens, self.speculative_num_steps)
            predict = self.target_worker.forward_batch_generation(
                self.draft_tokens, self.draft_positions, is_verify=True)
        with self.phases.span("spec.accept"):
            res = spec_info.verify(self, predict)
        return res

    def forward_draft_extend_after_decode(self):
        with self.phases.span("spec.draft_extend"):
            if self.draft_extend_graph_runner is not None:
                self.draft_extend_graph_runner.replay()
            else:
                self._draft_extend_forward()

    def _draft_extend_forward(self):
        self.extend_out.copy_(self.draft_model.greedy(self.extend_ids, self.extend_positions))
