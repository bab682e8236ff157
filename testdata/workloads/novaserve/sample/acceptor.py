"""Acceptance: a greedy-match kernel and a blocking copy of the accepted count."""

import ctypes

from fakecuda import tag, truth_tag


class TokenAcceptor(object):
    def __init__(self, gpu, k, dptr):
        self.gpu, self.k, self.dptr = gpu, k, dptr
        self.host = ctypes.create_string_buffer(8)

    def accept(self, stream, cycle):
        with tag(truth_tag("tokenacceptor.accept", cycle)):
            self.gpu.launch(self.k["verify"], stream)
            self.gpu.dtoh(self.host, self.dptr, stream=None, sync=True)
