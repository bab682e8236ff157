"""vllm/v1/outputs.py: ModelRunnerOutput and the AsyncModelRunnerOutput interface."""


class ModelRunnerOutput(object):
    def __init__(self, req_ids=None, sampled_token_ids=None):
        self.req_ids = req_ids
        self.sampled_token_ids = sampled_token_ids


class AsyncModelRunnerOutput(object):
    def get_output(self):
        raise NotImplementedError
