"""vllm/v1/engine/core.py: EngineCore.step (schedule, execute_model, sample_tokens, update) and,
with async scheduling, step_with_batch_queue (keeps two steps in flight: the next step is
scheduled and launched before the previous one's output is waited for); EngineCoreProc's busy
loop runs one of them per iteration."""

from collections import deque

from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.executor.uniproc_executor import UniProcExecutor


class EngineCore(object):
    def __init__(self, vllm_config, steps, prefill_tokens):
        self.vllm_config = vllm_config
        self.model_executor = UniProcExecutor(vllm_config)
        self._initialize_kv_caches()
        self.scheduler = Scheduler(steps, vllm_config.num_speculative_tokens, prefill_tokens)
        self.async_scheduling = vllm_config.async_scheduling
        self.batch_queue_size = self.model_executor.max_concurrent_batches
        self.batch_queue = None
        if self.batch_queue_size > 1:
            self.batch_queue = deque(maxlen=self.batch_queue_size)
        self.is_pooling_model = False
        # An engine that does not produce encoder-cache outputs consumes them (and runs the
        # model in every step).
        self.is_ec_consumer = True
        self.check_for_draft_tokens = False
        self.step_fn = self.step if self.batch_queue is None else self.step_with_batch_queue

    def _initialize_kv_caches(self):
        self.model_executor.driver_worker.compile_or_warm_up_model()

    def step(self):
        if not self.scheduler.has_requests():
            return {}, False
        scheduler_output = self.scheduler.schedule()
        future = self.model_executor.execute_model(scheduler_output, non_block=True)
        grammar_output = self.scheduler.get_grammar_bitmask(scheduler_output)
        model_output = future.result()
        if model_output is None:
            model_output = self.model_executor.sample_tokens(grammar_output)
        engine_core_outputs = self.scheduler.update_from_output(scheduler_output, model_output)
        return engine_core_outputs, scheduler_output.total_num_scheduled_tokens > 0

    def post_step(self, model_executed):
        if self.check_for_draft_tokens and not self.async_scheduling and model_executed:
            self.model_executor.take_draft_token_ids()

    def step_with_batch_queue(self):
        batch_queue = self.batch_queue
        assert len(batch_queue) < self.batch_queue_size
        model_executed = False
        deferred_scheduler_output = None
        if self.scheduler.has_requests():
            scheduler_output = self.scheduler.schedule()
            exec_future = self.model_executor.execute_model(scheduler_output, non_block=True)
            if self.is_ec_consumer:
                model_executed = scheduler_output.total_num_scheduled_tokens > 0
            if self.is_pooling_model or not model_executed:
                future = exec_future
            else:
                if not scheduler_output.pending_structured_output_tokens:
                    grammar_output = self.scheduler.get_grammar_bitmask(scheduler_output)
                    future = self.model_executor.sample_tokens(grammar_output, non_block=True)
                else:
                    deferred_scheduler_output = scheduler_output
            if not deferred_scheduler_output:
                batch_queue.appendleft((future, scheduler_output, exec_future))
                if len(batch_queue) < self.batch_queue_size and (
                        model_executed or self.scheduler.has_requests()):
                    return None, model_executed
        elif not batch_queue:
            return None, False
        future, scheduler_output, exec_model_fut = batch_queue.pop()
        model_output = future.result()
        if model_output is None:
            exec_model_fut.result()
            raise RuntimeError("unexpected error")
        engine_core_outputs = self.scheduler.update_from_output(scheduler_output, model_output)
        return engine_core_outputs, model_executed

    def shutdown(self):
        self.model_executor.shutdown()


class EngineCoreProc(EngineCore):
    """The engine core process's loop. Requests would arrive on input_queue; here the one
    request is there from the start, and the loop ends (as on shutdown) when it is done."""

    def _process_input_queue(self):
        if not self.scheduler.has_requests() and not self.batch_queue:
            raise SystemExit(0)

    def _process_engine_step(self):
        outputs, model_executed = self.step_fn()
        self.post_step(model_executed)
        return model_executed

    def run_busy_loop(self):
        while True:
            self._process_input_queue()
            self._process_engine_step()

    @staticmethod
    def run_engine_core(vllm_config, steps, prefill_tokens):
        engine_core = EngineCoreProc(vllm_config, steps, prefill_tokens)
        try:
            engine_core.run_busy_loop()
        except SystemExit:
            pass
        finally:
            engine_core.shutdown()
        return engine_core
