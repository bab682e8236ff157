"""Mirrors sglang/srt/speculative/standalone_worker_v2.py (main): STANDALONE speculative decoding
with a separate small draft model. StandaloneDraftWorker(EagleDraftWorker) and
StandaloneWorkerV2(EAGLEWorkerV2) override only their constructors and init_lm_head (the draft
keeps its own embedding and lm_head): every method a cycle runs (forward_batch_generation,
draft, draft_forward, verify, _draft_extend_for_decode, _draft_extend_for_prefill) is the
inherited one, so the frames name EAGLEWorkerV2 / EagleDraftWorker in eagle_worker_v2.py."""

from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker, EAGLEWorkerV2
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm


class StandaloneDraftWorker(EagleDraftWorker):
    """An EagleDraftWorker that does not share embeddings / lm_head with the target model."""

    def __init__(self, server_args, gpu, target_worker):
        # As upstream: sets its fields itself instead of calling EagleDraftWorker.__init__.
        self.server_args = server_args
        self.gpu = gpu
        self.target_worker = target_worker
        self.topk = server_args.speculative_eagle_topk
        self.speculative_num_steps = server_args.speculative_num_steps
        self.speculative_num_draft_tokens = server_args.speculative_num_draft_tokens
        self.speculative_algorithm = SpeculativeAlgorithm.from_string(server_args.speculative_algorithm)
        self.draft_worker = TpModelWorker(server_args, gpu, server_args.draft_num_hidden_layers, is_draft_worker=True)
        self.draft_runner = self.draft_worker.model_runner
        self.init_lm_head()

    def init_lm_head(self):
        # The standalone draft model keeps its own embedding and lm_head.
        pass


class StandaloneWorkerV2(EAGLEWorkerV2):
    def __init__(self, server_args, gpu, target_worker):
        # As upstream: does not call EAGLEWorkerV2.__init__.
        self.server_args = server_args
        self.gpu = gpu
        self.topk = server_args.speculative_eagle_topk
        self.speculative_num_steps = server_args.speculative_num_steps
        self.speculative_num_draft_tokens = server_args.speculative_num_draft_tokens
        self.speculative_algorithm = SpeculativeAlgorithm.from_string(server_args.speculative_algorithm)
        self._target_worker = target_worker
        self._draft_worker = StandaloneDraftWorker(server_args, gpu, target_worker)
