"""One speculative step: propose, score, accept, and a bookkeeping kernel of its own."""

from fakecuda import tag, truth_tag


class StepWorker(object):
    def __init__(self, gpu, k, proposer, runner, acceptor, stream):
        self.gpu, self.k = gpu, k
        self.proposer, self.runner, self.acceptor = proposer, runner, acceptor
        self.stream = stream
        self.cycle = 0

    def execute_step(self):
        self.cycle += 1
        c = self.cycle
        self.proposer.propose(self.stream, c)
        self.runner.score_drafts(self.stream, c)
        self.acceptor.accept(self.stream, c)
        with tag(truth_tag("stepworker.execute_step", c)):
            self.gpu.launch(self.k["bookkeeping"], self.stream)
