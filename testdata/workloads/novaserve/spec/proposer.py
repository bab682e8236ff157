"""Drafting: K forwards of the draft net, then a top-k kernel."""

from fakecuda import tag, truth_tag


class DraftProposer(object):
    def __init__(self, gpu, k, net, steps):
        self.gpu, self.k, self.net, self.steps = gpu, k, net, steps

    def propose(self, stream, cycle):
        with tag(truth_tag("draftproposer.propose", cycle)):
            for _ in range(self.steps):
                self.net.forward(stream)
            self.gpu.launch(self.k["topk"], stream)
