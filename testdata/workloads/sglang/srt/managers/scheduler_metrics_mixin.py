"""Mirrors sglang/srt/managers/scheduler_metrics_mixin.py: the `Decode batch` log line."""

import sys
import time

from fakecuda import tag


class SchedulerMetricsMixin(object):
    def init_metrics(self):
        self.last_decode_stats_tic = time.perf_counter()
        self.num_generated_tokens = 0
        self.spec_num_total_accepted_tokens = 0
        self.spec_num_total_forward_ct = 0
        self.forward_ct_decode = 0
        self.metrics_event = self.gpu.cuda.event()

    def update_spec_metrics(self, bs, num_accepted_tokens):
        self.spec_num_total_accepted_tokens += num_accepted_tokens + bs
        self.spec_num_total_forward_ct += bs

    def log_decode_stats(self, can_run_cuda_graph, running_batch=None):
        with tag("sched.metrics"):
            self.gpu.cuda.event_record(self.metrics_event, self.gpu.stream)
            batch = running_batch
            now = time.perf_counter()
            gap_latency = max(now - self.last_decode_stats_tic, 1e-9)
            self.last_decode_stats_tic = now
            self.last_gen_throughput = self.num_generated_tokens / gap_latency
            self.num_generated_tokens = 0
            num_used = batch.seq_lens_sum() if batch is not None else 0
            num_running_reqs = batch.batch_size() if batch is not None else 0
            if self.spec_num_total_forward_ct:
                spec_accept_length = (self.spec_num_total_accepted_tokens
                                      / self.spec_num_total_forward_ct)
            else:
                spec_accept_length = 0.0
            spec_accept_rate = spec_accept_length / self.server_args.speculative_num_draft_tokens
            self.spec_num_total_accepted_tokens = 0
            self.spec_num_total_forward_ct = 0
            msg = (
                "[%s TP%d] Decode batch, #running-req: %d, #token: %d, token usage: %.2f, "
                "accept len: %.2f, accept rate: %.2f, cuda graph: %s, "
                "gen throughput (token/s): %.2f, #queue-req: %d, " % (
                    time.strftime("%Y-%m-%d %H:%M:%S"), self.tp_rank, num_running_reqs,
                    num_used, num_used / float(self.server_args.max_total_num_tokens),
                    spec_accept_length, spec_accept_rate, can_run_cuda_graph,
                    self.last_gen_throughput, 0))
            sys.stdout.write(msg + "\n")
            sys.stdout.flush()
