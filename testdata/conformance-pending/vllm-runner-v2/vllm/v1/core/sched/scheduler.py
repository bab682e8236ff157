"""vllm/v1/core/sched/scheduler.py: the scheduler, reduced to one request of `steps` engine steps:
a prefill, then decode steps with num_speculative_tokens drafts each. With async scheduling it
schedules a step before the previous step's output arrived; once every step is scheduled it
returns empty steps until the outputs are in."""


class SchedulerOutput(object):
    def __init__(self, step, num_tokens, num_draft_tokens):
        self.step = step
        self.total_num_scheduled_tokens = num_tokens
        self.num_draft_tokens = num_draft_tokens
        self.pending_structured_output_tokens = False
        self.finished_req_ids = set()


class Scheduler(object):
    def __init__(self, steps, num_speculative_tokens, prefill_tokens):
        self.steps = steps
        self.k = num_speculative_tokens
        self.prefill_tokens = prefill_tokens
        self.scheduled = 0
        self.finished = 0

    def has_requests(self):
        return self.finished < self.steps

    def schedule(self, throttle_prefills=False):
        if self.scheduled >= self.steps:
            return SchedulerOutput(0, 0, 0)
        self.scheduled += 1
        if self.scheduled == 1:
            return SchedulerOutput(1, self.prefill_tokens, 0)
        return SchedulerOutput(self.scheduled, self.k + 1, self.k)

    def get_grammar_bitmask(self, scheduler_output):
        return None

    def update_from_output(self, scheduler_output, model_output):
        if scheduler_output.total_num_scheduled_tokens > 0:
            self.finished += 1
        return {}
