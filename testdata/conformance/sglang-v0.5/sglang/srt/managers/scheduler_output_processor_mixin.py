"""Mirrors sglang/srt/managers/scheduler_output_processor_mixin.py (v0.5, spec v1, overlap off).

Prefill: next_token_ids.tolist() on the device tensor blocks (a copy and a stream sync).
Decode with spec v1: the output tokens were appended to the requests inside
EagleVerifyInput.verify, so result processing makes no CUDA call."""

import ctypes

from oracle import ph


class SchedulerOutputProcessorMixin(object):
    def process_batch_result_prefill(self, batch, result):
        with ph("sched.result"):
            if result.copy_done is not None:
                result.copy_done.synchronize()
            buf = (ctypes.c_int64 * batch.batch_size())()
            self.gpu.blocking_dtoh(buf, self.token_ids_dev)  # next_token_ids.tolist()
            for req, tok in zip(batch.reqs, buf):
                req.output_ids.append(tok)
            self.stream_output(batch.reqs)

    def process_batch_result_decode(self, batch, result):
        with ph("sched.result"):
            if result.copy_done is not None:
                result.copy_done.synchronize()
            self.num_generated_tokens += result.num_accepted_tokens + batch.batch_size()
            self.forward_ct_decode += 1
            if self.forward_ct_decode % 4 == 0:
                self.log_decode_stats(result.can_run_cuda_graph, running_batch=batch)
            self.stream_output(batch.reqs)

    def stream_output(self, reqs):
        return len(reqs)

    def log_decode_stats(self, can_run_cuda_graph, running_batch=None):
        self.decode_log_lines += 1
