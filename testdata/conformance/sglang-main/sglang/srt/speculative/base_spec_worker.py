"""Mirrors sglang/srt/speculative/base_spec_worker.py (main): BaseSpecWorker / EagleDraftWorkerBase.
init_cuda_graphs goes worker -> draft worker -> _capture_cuda_graphs; the topk=1 chain constants
that draft_forward's fast path returns are built once, at start-up."""


class EagleDraftWorkerBase(object):
    _topk1_parents_prealloc = None
    _topk1_score_indices_prealloc = None

    def init_cuda_graphs(self):
        self._capture_cuda_graphs()

    def _rebuild_topk1_chain_buffers(self):
        if self.topk != 1:
            return
        # torch.arange(...).repeat(max_bs, 1) for parents and score indices, on the device
        self.gpu.launch("spec_bookkeeping", 1)
        self.gpu.launch("spec_bookkeeping", 1)
        self._topk1_parents_prealloc = "parents"
        self._topk1_score_indices_prealloc = "score_indices"


class BaseSpecWorker(object):
    @property
    def target_worker(self):
        return self._target_worker

    @property
    def draft_worker(self):
        return self._draft_worker

    def init_cuda_graphs(self):
        if self.draft_worker is not None:
            self.draft_worker.init_cuda_graphs()
