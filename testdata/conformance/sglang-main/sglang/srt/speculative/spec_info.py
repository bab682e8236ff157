"""Mirrors sglang/srt/speculative/spec_info.py (main): SpeculativeAlgorithm.create_worker picks
the V2 worker class: MultiLayerEagleWorkerV2 for EAGLE with --enable-multi-layer-eagle,
EAGLEWorkerV2 for EAGLE, StandaloneWorkerV2 for STANDALONE."""


class SpeculativeAlgorithm(object):
    NAMES = ("EAGLE", "EAGLE3", "STANDALONE")

    def __init__(self, name):
        self.name = name

    @classmethod
    def from_string(cls, name):
        upper = name.upper()
        if upper not in cls.NAMES:
            raise ValueError("Unknown speculative algorithm name: %s" % name)
        return cls(upper)

    def is_eagle(self):
        return self.name in ("EAGLE", "EAGLE3")

    def is_standalone(self):
        return self.name == "STANDALONE"

    def create_worker(self, server_args):
        if self.is_eagle() and server_args.enable_multi_layer_eagle:
            from sglang.srt.speculative.multi_layer_eagle_worker_v2 import MultiLayerEagleWorkerV2
            return MultiLayerEagleWorkerV2
        if self.is_eagle():
            from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2
            return EAGLEWorkerV2
        if self.is_standalone():
            from sglang.srt.speculative.standalone_worker_v2 import StandaloneWorkerV2
            return StandaloneWorkerV2
        raise ValueError("Unreachable code path in create_worker.")
