"""Mirrors sglang/srt/managers/scheduler_output_processor_mixin.py. The preset matches the
result-processing functions by co_name (process_batch_result_decode), not by class."""

from fakecuda import tag


class SchedulerOutputProcessorMixin(object):
    def process_batch_result_decode(self, batch, result):
        with tag("sched.result"):
            gpu = self.gpu
            # next_token_ids / output bookkeeping on the device, then wait for the stream.
            gpu.launch("copy_next_token_ids", batch.batch_size())
            gpu.sync()
            self.forward_ct_decode += 1
            self.num_generated_tokens += result.num_accepted_tokens + batch.batch_size()
            self.update_spec_metrics(batch.batch_size(), result.num_accepted_tokens)
            # Every decode_log_interval steps, and once after the last step of the run (this
            # loop ends; a server's does not) so that short runs print a line too.
            if (self.forward_ct_decode % self.server_args.decode_log_interval == 0
                    or self.forward_ct_decode == self.server_args.num_cycles):
                self.log_decode_stats(result.can_run_cuda_graph, running_batch=batch)
