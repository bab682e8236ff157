#!/usr/bin/env python3
"""Hugging Face transformers 5.x assisted / speculative decoding on a simulated GPU.

A user script calls `model.generate(input_ids, attention_mask=..., assistant_model=draft)` on a
Llama target with a smaller Llama assistant; generate dispatches to
GenerationMixin._assisted_decoding, one speculative cycle per iteration of its while loop
(transformers/generation/utils.py here; see conformance.yaml for the upstream files). Every CUDA
driver call is made under the ground-truth tag of what the real code is doing at that point.

    make -C testdata/standin OUT=/tmp/sb
    LD_LIBRARY_PATH=/tmp/sb SPECPROF_SIM_TRUTH=/tmp/t.jsonl \\
        python3 testdata/conformance/transformers-5/workload.py --cycles 8 --mode greedy

Only the standard library; CPython 3.10-3.13.
"""

import argparse
import json
import os
import sys

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = os.path.join(os.path.dirname(os.path.dirname(HERE)), "workloads")
for d in (WORKLOADS, HERE):
    if d not in sys.path:
        sys.path.insert(0, d)

import fakecuda  # noqa: E402
from fakecuda import tag  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cycles", type=int, default=16,
                   help="speculative cycles: the target predicts EOS in its N-th forward")
    p.add_argument("--mode", choices=("greedy", "sample"), default="greedy",
                   help="greedy: do_sample=False (the inline match); sample: do_sample=True, "
                        "temperature 0.7, top_k 50 (_speculative_sampling)")
    p.add_argument("--draft-tokens", type=int, default=5,
                   help="the assistant's num_assistant_tokens (schedule \"constant\")")
    p.add_argument("--schedule", choices=("constant", "heuristic"), default="constant",
                   help="the assistant's num_assistant_tokens_schedule")
    p.add_argument("--sklearn", action="store_true",
                   help="scikit-learn installed: the candidate generator tracks draft "
                        "probabilities (.tolist() in the draft) and matches (in the strategy)")
    p.add_argument("--layers", type=int, default=4, help="target decoder layers")
    p.add_argument("--draft-layers", type=int, default=2, help="assistant decoder layers")
    p.add_argument("--prompt-len", type=int, default=12, help="prompt tokens")
    p.add_argument("--generate-calls", type=int, default=1,
                   help="generate calls, one after another; --cycles is split between them")
    p.add_argument("--accept-prob", type=float, default=0.7,
                   help="probability that the assistant predicts the target's token")
    p.add_argument("--confidence-stop", type=float, default=0.15,
                   help="probability that the assistant's confidence falls below its threshold "
                        "at a drafted token (ConfidenceCriteria ends the draft)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kernel-us", type=float, default=5.0, help="base simulated kernel duration")
    a = p.parse_args(argv)
    if a.cycles < 1 or a.draft_tokens < 1 or a.layers < 1 or a.draft_layers < 1:
        p.error("--cycles, --draft-tokens, --layers and --draft-layers must be >= 1")
    if a.generate_calls < 1 or a.generate_calls > a.cycles:
        p.error("--generate-calls must be between 1 and --cycles")
    return a


def main(argv=None):
    a = parse_args(argv)
    import simtorch
    from transformers.generation import candidate_generator
    from transformers.generation.configuration_utils import GenerationConfig
    from transformers.models.llama.modeling_llama import LlamaConfig, LlamaForCausalLM

    candidate_generator._SKLEARN[0] = a.sklearn
    with tag("other"):
        cuda = fakecuda.Cuda()
        simtorch.init(cuda, a.kernel_us)
        target_gc = GenerationConfig(bos_token_id=1, eos_token_id=simtorch.EOS, do_sample=a.mode == "sample")
        assistant_gc = GenerationConfig(bos_token_id=1, eos_token_id=simtorch.EOS,
                                        num_assistant_tokens=a.draft_tokens,
                                        num_assistant_tokens_schedule=a.schedule)
        target = LlamaForCausalLM(LlamaConfig(a.layers, "target"), target_gc)
        assistant = LlamaForCausalLM(LlamaConfig(a.draft_layers, "assistant"), assistant_gc)

    per_call = [a.cycles // a.generate_calls + (1 if i < a.cycles % a.generate_calls else 0)
                for i in range(a.generate_calls)]
    tokens = 0
    for i, n in enumerate(per_call):
        simtorch.ORACLE = simtorch.Oracle(a.seed + i, a.accept_prob, a.confidence_stop, n)
        target.forwards = 0
        with tag("other"):
            # tokenizer(prompt, return_tensors="pt").to("cuda"): input_ids and attention_mask
            prompt = [1] + [simtorch.ORACLE.target_token(p) for p in range(1, a.prompt_len)]
            input_ids = simtorch.Ids(prompt)
            simtorch.DEV.h2d()
            attention_mask = simtorch.Tensor(len(prompt), (1, len(prompt)))
            simtorch.DEV.h2d()
            kwargs = {}
            if a.mode == "sample":
                kwargs = {"temperature": 0.7, "top_k": 50}
            out = target.generate(input_ids, attention_mask=attention_mask, assistant_model=assistant,
                                  max_new_tokens=n * (a.draft_tokens + 1) + 8, **kwargs)
            # tokenizer.decode(out[0]): the ids come back to the host
            ids = out.tolist()
        tokens += len(ids) - len(prompt)

    ran = simtorch.cycles_run()
    if ran != a.cycles:
        sys.stderr.write("workload: %d cycles ran, %d asked for\n" % (ran, a.cycles))
        return 1
    print(json.dumps({"cycles": ran, "tokens": tokens, "mode": a.mode, "pid": os.getpid(),
                      "calls": fakecuda.call_counts()}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
