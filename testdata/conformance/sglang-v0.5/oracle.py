"""Ground truth of the conformance workload: which cycle of the calling thread is open.

`cur` is the number of the cycle the scheduler thread is in (set by the cycle function, as the
real code defines one step), None outside. `ph(phase, cycle)` is fakecuda.tag(truth_tag(...))."""

import fakecuda


class _Oracle(object):
    def __init__(self):
        self.cur = None   # cycle being run by the cycle function, else None
        self.n = 0        # cycles begun so far

    def begin(self):
        self.n += 1
        self.cur = self.n
        return self.n

    def end(self):
        self.cur = None


O = _Oracle()


def ph(phase, cycle=None):
    return fakecuda.tag(fakecuda.truth_tag(phase, cycle))
