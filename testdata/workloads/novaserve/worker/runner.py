"""Scoring the drafts: one forward of the target net."""

from fakecuda import tag, truth_tag


class TargetRunner(object):
    def __init__(self, net):
        self.net = net

    def score_drafts(self, stream, cycle):
        with tag(truth_tag("targetrunner.score_drafts", cycle)):
            self.net.forward(stream)
