"""Mirrors sglang/srt/speculative/base_spec_worker.py (main): BaseSpecWorker / EagleDraftWorkerBase."""


class EagleDraftWorkerBase(object):
    pass


class BaseSpecWorker(object):
    @property
    def target_worker(self):
        return self._target_worker

    @property
    def draft_worker(self):
        return self._draft_worker
