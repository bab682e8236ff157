#!/usr/bin/env python3
"""Hugging Face transformers assisted generation (speculative decoding) on a real GPU, for the
benchmark suite (bench/gpu/suite.py). No downloads: random weights from a fixed seed, greedy.

Models (LlamaForCausalLM, bf16, eager PyTorch, sdpa attention by default):
  draft   --draft-layers decoder layers (default 2; hidden 2048, MLP 8192, 32 heads / 8 KV heads,
          vocab 32000: ~0.25 B parameters);
  target  the draft's layers, embeddings, final norm and LM head, plus --target-layers minus
          --draft-layers extra layers (default 16 in all: ~1.1 B). The extra layers' output
          projections (o_proj, down_proj) would make them the identity at zero; they are set to
          `scale` x random noise, so the target disagrees with the draft more as the scale grows.
The scale is calibrated (--calibrate-only, or whenever --noise-scale is not given) so that the
draft predicts the target's next greedy token with probability --target-agree along the target's
own greedy continuations; with --assist-tokens 4 (num_assistant_tokens, constant schedule, no
confidence threshold) that gives about 3 tokens per cycle.

Measured: --prompts random prompts of --prompt-len tokens, each `target.generate(...,
assistant_model=draft, do_sample=False, max_new_tokens=--new-tokens)` (batch 1, as assisted
generation requires), after --warmup-passes untimed passes over the same prompts (steady state: the
first pass over new shapes is several times slower). Accept length = generated tokens / target
forwards (one target forward per assisted-decoding cycle; counted with a forward pre-hook).
--timing: how the workload times its own phases (benchphase.py); the draft phase is
AssistedCandidateGenerator.get_candidates (wrapped only when a timing mode is on), the verify
phase the target's forward (forward pre-/post-hooks). With --timing none nothing is wrapped, so
the stack is transformers' own (GenerationMixin._assisted_decoding -> get_candidates / the target
forward), which specprof's hf-assisted preset names.

Writes one JSON result (--result; also the last stdout line).
"""

import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import benchphase  # noqa: E402

PHASES = ("spec.draft", "spec.verify")


def log(msg):
    sys.stderr.write("[hf_assisted] %s\n" % msg)
    sys.stderr.flush()


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--timing", default="none", choices=list(benchphase.MODES),
                   help="how the workload times its phases")
    p.add_argument("--v3", action="store_const", dest="timing", const="v3",
                   help="= --timing v3 (synchronising timers)")
    p.add_argument("--v4", action="store_const", dest="timing", const="v4",
                   help="= --timing v4 (wall-clock timers, no sync)")
    p.add_argument("--cuda-events", action="store_const", dest="timing", const="cuda-events",
                   help="= --timing cuda-events (ground truth)")
    p.add_argument("--torch-profiler", action="store_const", dest="timing", const="torch-profiler",
                   help="= --timing torch-profiler")
    p.add_argument("--result", default="", help="write the result JSON here (also printed)")
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--warmup-tokens", type=int, default=16,
                   help="with --warmup-passes 0: one generate of this many tokens of the first prompt")
    p.add_argument("--warmup-passes", type=int, default=2,
                   help="untimed passes over every prompt (--new-tokens each) before the measured loop: "
                        "the first pass over new shapes ran 3.5-6x slower than later ones on the H200 "
                        "(docs/benchmarks/h200.md §17c), so without them the loop measures warm-up")
    p.add_argument("--loop-passes", type=int, default=1,
                   help="passes over every prompt in the measured loop: a loop long enough for a profiler's "
                        "sampled windows (seconds apart) to fall in it; tokens count every pass")
    p.add_argument("--assist-tokens", type=int, default=4, help="num_assistant_tokens (draft tokens per cycle)")
    p.add_argument("--noise-scale", type=float, default=None,
                   help="strength of the target's extra layers (default: calibrate)")
    p.add_argument("--target-agree", type=float, default=0.75)
    p.add_argument("--calibrate-only", action="store_true", help="calibrate, write the scale, exit")
    p.add_argument("--calib-tokens", type=int, default=48, help="greedy tokens per prompt for calibration")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--intermediate", type=int, default=8192)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--target-layers", type=int, default=16)
    p.add_argument("--draft-layers", type=int, default=2)
    p.add_argument("--max-pos", type=int, default=2048)
    p.add_argument("--embed-std", type=float, default=1.0, help="init std of the token embedding")
    p.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"])
    p.add_argument("--trace-dir", default="", help="torch-profiler: where the Chrome trace goes")
    p.add_argument("--keep-trace", action="store_true")
    p.add_argument("--repeat-s", type=float, default=0.0,
                   help="after the measured loop, go on generating the same prompts in turn for this many "
                        "seconds, timing each generate (wall clock) for an in-process A/B "
                        "(bench/gpu/abattach.py); every repeat must give the first pass's tokens")
    p.add_argument("--ready-file", default="",
                   help="with --repeat-s: write this file (the pid) when the repeats start")
    a = p.parse_args(argv)
    if a.loop_passes < 1:
        p.error("--loop-passes must be >= 1")
    if a.repeat_s < 0 or a.warmup_passes < 0:
        p.error("--repeat-s and --warmup-passes must be >= 0")
    if a.draft_layers < 1 or a.target_layers <= a.draft_layers:
        p.error("need 1 <= --draft-layers < --target-layers")
    return a


def make_config(a, layers, notes):
    from transformers import LlamaConfig
    kw = dict(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.intermediate,
              num_hidden_layers=layers, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
              max_position_embeddings=a.max_pos, tie_word_embeddings=False, use_cache=True,
              bos_token_id=None, eos_token_id=None, pad_token_id=0)
    try:
        cfg = LlamaConfig(attn_implementation=a.attn, **kw)
    except Exception as e:   # TypeError, or a strict-config validation error
        notes.append("LlamaConfig(attn_implementation=...) refused (%s); set afterwards" % e)
        cfg = LlamaConfig(**kw)
    try:
        if getattr(cfg, "_attn_implementation", None) != a.attn:
            cfg._attn_implementation = a.attn
    except Exception as e:  # a property without setter in some version
        notes.append("could not set _attn_implementation: %s" % e)
    return cfg


def init_params(torch, model, gen, std=0.02, embed_std=1.0):
    """Seeded init, in named_parameters() order: matrices N(0, std), the token embedding
    N(0, embed_std) (large, so the current token weighs against the context average and greedy
    continuations of a random model do not collapse into repeating one token), norms 1."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, embed_std if "embed_tokens" in name else std, generator=gen)
            else:
                p.fill_(1.0)


def build_models(a, torch, notes):
    from transformers import LlamaForCausalLM
    dcfg = make_config(a, a.draft_layers, notes)
    tcfg = make_config(a, a.target_layers, notes)
    with torch.device("cuda"):
        draft = LlamaForCausalLM(dcfg)
        target = LlamaForCausalLM(tcfg)
    draft = draft.to(dtype=torch.bfloat16).eval().requires_grad_(False)
    target = target.to(dtype=torch.bfloat16).eval().requires_grad_(False)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(a.seed)
    init_params(torch, draft, gen, embed_std=a.embed_std)
    init_params(torch, target, gen, embed_std=a.embed_std)
    dp = dict(draft.named_parameters())
    noise = []
    copied = 0
    with torch.no_grad():
        for name, p in target.named_parameters():
            src = dp.get(name)
            if src is not None and src.shape == p.shape:
                p.copy_(src)
                copied += 1
            elif name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
                noise.append((p, p.detach().clone()))
    extra = a.target_layers - a.draft_layers
    if copied != len(dp) or len(noise) != 2 * extra:
        raise RuntimeError("target from draft: copied %d of %d draft tensors; %d output projections "
                           "for %d extra layers (parameter names: %s ...)"
                           % (copied, len(dp), len(noise), extra, list(dp)[:4]))
    for m in (draft, target):
        gc = m.generation_config
        gc.eos_token_id = None
        gc.bos_token_id = None
        gc.pad_token_id = 0
        gc.do_sample = False
    dgc = draft.generation_config
    # AssistedCandidateGenerator reads these from the assistant's generation_config.
    dgc.num_assistant_tokens = a.assist_tokens
    dgc.num_assistant_tokens_schedule = "constant"
    dgc.assistant_confidence_threshold = 0.0   # 0: no ConfidenceCriteria (and not None: kept as set)
    return draft, target, noise


def set_scale(torch, noise, scale):
    with torch.no_grad():
        for p, n in noise:
            p.copy_(n * scale)


def sequences(out):
    return out.sequences if hasattr(out, "sequences") else out


def greedy(target, torch, ids, n):
    return sequences(target.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                     do_sample=False, max_new_tokens=n, pad_token_id=0))


def assisted(target, draft, torch, ids, n):
    return sequences(target.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                     assistant_model=draft, do_sample=False, max_new_tokens=n,
                                     pad_token_id=0))


def agreement(target, draft, torch, batch, n):
    """Share of positions where the draft's greedy next token equals the target's own greedy
    continuation (teacher-forced on it): the per-token acceptance of greedy assisted decoding."""
    seq = greedy(target, torch, batch, n)
    L = batch.shape[1]
    logits = draft(input_ids=seq, attention_mask=torch.ones_like(seq)).logits
    pred = logits[:, L - 1:-1].argmax(-1)
    return float((pred == seq[:, L:]).float().mean().item())


def install_timing(ph, target, draft, notes):
    """Wraps the draft phase and hooks the verify phase for the timing methods."""
    try:
        from transformers.generation.candidate_generator import AssistedCandidateGenerator
        orig = AssistedCandidateGenerator.get_candidates

        def get_candidates(self, *args, **kwargs):
            ph.begin("spec.draft")
            try:
                return orig(self, *args, **kwargs)
            finally:
                ph.end("spec.draft")

        AssistedCandidateGenerator.get_candidates = get_candidates
        notes.append("draft phase: AssistedCandidateGenerator.get_candidates wrapped")
    except Exception as e:
        orig_generate = draft.generate

        def generate(*args, **kwargs):
            ph.begin("spec.draft")
            try:
                return orig_generate(*args, **kwargs)
            finally:
                ph.end("spec.draft")

        draft.generate = generate
        notes.append("draft phase: assistant generate wrapped (get_candidates not found: %s)" % e)
    target.register_forward_pre_hook(lambda m, args: ph.begin("spec.verify"))
    target.register_forward_hook(lambda m, args, out: ph.end("spec.verify"))
    notes.append("verify phase: target forward (pre/post hooks)")


def main(argv=None):
    a = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    t_start = time.monotonic()
    import torch
    import transformers
    notes = []
    res = {"workload": "hf", "ok": False, "timing": a.timing, "pid": os.getpid(), "notes": notes,
           "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                        "cuda": torch.version.cuda, "python": sys.version.split()[0]}}
    try:
        _run(a, torch, res, notes, t_start)
    except Exception as e:
        import traceback
        traceback.print_exc()
        res["error"] = "%s: %s" % (type(e).__name__, e)
        benchphase.write_result(a.result, res)
        return 1
    benchphase.write_result(a.result, res)
    return 0 if res.get("ok") else 1


def _run(a, torch, res, notes, t_start):
    res["versions"]["device"] = torch.cuda.get_device_name()
    torch.manual_seed(a.seed)
    # Built outside inference mode (ordinary parameters, set in place under no_grad), run inside.
    draft, target, noise = build_models(a, torch, notes)
    with torch.inference_mode():
        res["attn_implementation"] = getattr(target.config, "_attn_implementation", None)
        res["draft_params"] = sum(p.numel() for p in draft.parameters())
        res["target_params"] = sum(p.numel() for p in target.parameters())
        log("draft %.2f B parameters (%d layers), target %.2f B (%d layers), attention %s"
            % (res["draft_params"] / 1e9, a.draft_layers, res["target_params"] / 1e9,
               a.target_layers, res["attn_implementation"]))
        gen = torch.Generator(device="cuda")
        gen.manual_seed(a.seed + 1)
        prompts = [torch.randint(1, a.vocab, (1, a.prompt_len), device="cuda", generator=gen)
                   for _ in range(a.prompts)]
        batch = torch.cat(prompts, 0)

        def measure(scale):
            set_scale(torch, noise, scale)
            return agreement(target, draft, torch, batch, a.calib_tokens)

        if a.noise_scale is None or a.calibrate_only:
            scale, agree = benchphase.calibrate_scale(measure, a.target_agree, log=log)
            set_scale(torch, noise, scale)
        else:
            scale = a.noise_scale
            set_scale(torch, noise, scale)
            agree = None
        res.update(noise_scale=scale, agreement=agree)
        log("noise scale %.6g, agreement %s" % (scale, "%.3f" % agree if agree is not None else "(not measured)"))
        if a.calibrate_only:
            res["ok"] = True
            res["setup_s"] = time.monotonic() - t_start
            return

        counts = {"target": 0, "draft": 0}

        def counter(key):
            def hook(module, args):
                counts[key] += 1
            return hook

        target.register_forward_pre_hook(counter("target"))
        draft.register_forward_pre_hook(counter("draft"))
        notes.append("accept length = generated tokens / target forwards (forward pre-hook count; "
                     "one target forward per assisted-decoding cycle)")
        ph = benchphase.Phases(a.timing, torch)
        if ph.enabled:
            install_timing(ph, target, draft, notes)

        if a.warmup_passes > 0:
            t_w = time.monotonic()
            for _ in range(a.warmup_passes):
                for ids in prompts:
                    assisted(target, draft, torch, ids, a.new_tokens)
            torch.cuda.synchronize()
            res["warmup_s"] = time.monotonic() - t_w
        else:
            assisted(target, draft, torch, prompts[0], a.warmup_tokens)   # warm-up
            torch.cuda.synchronize()
        if counts["draft"] == 0:
            raise RuntimeError("the assistant never ran: generate(assistant_model=...) did not use "
                               "assisted decoding (transformers %s)" % res["versions"]["transformers"])
        counts["target"] = counts["draft"] = 0
        ph.reset()
        prof = None
        if a.timing == "torch-profiler":
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                      torch.profiler.ProfilerActivity.CUDA])
            prof.__enter__()
        res["setup_s"] = time.monotonic() - t_start
        outs = []  # every pass's outputs, prompt by prompt
        per_prompt_cycles = []
        t0 = time.perf_counter()
        loop_mono0 = time.monotonic_ns()  # CLOCK_MONOTONIC, specprof's clock: its cycles in the loop
        for _ in range(a.loop_passes):
            for ids in prompts:
                c = counts["target"]
                outs.append(assisted(target, draft, torch, ids, a.new_tokens))
                per_prompt_cycles.append(counts["target"] - c)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        res["loop_mono_ns"] = [loop_mono0, time.monotonic_ns()]
        phases = ph.summary()
        if prof is not None:
            t1 = time.monotonic()
            prof.__exit__(None, None, None)
            path = os.path.join(a.trace_dir or tempfile.gettempdir(), "hf_assisted-trace-%d.json" % os.getpid())
            prof.export_chrome_trace(path)
            try:
                res["profiler"] = benchphase.aggregate_chrome_trace(path, PHASES)
            finally:
                if a.keep_trace:
                    res["profiler_trace"] = path
                else:
                    os.remove(path)
            res["profiler_post_s"] = time.monotonic() - t1
        toks = []
        per_prompt_tokens = []
        for ids, out in zip(prompts * a.loop_passes, outs):
            new = out[0, ids.shape[1]:].tolist()
            per_prompt_tokens.append(len(new))
            toks.extend(new)
        outs = outs[-len(prompts):]  # the last pass's, one per prompt (--repeat-s compares with them)
    cycles = counts["target"]
    if len(toks) != a.prompts * a.new_tokens * a.loop_passes:
        notes.append("generated %d tokens, expected %d" % (len(toks), a.prompts * a.new_tokens * a.loop_passes))
    res.update(
        ok=True, cycles=cycles, tokens=len(toks), token_hash=benchphase.token_hash(toks),
        loop_s=dt, tok_s=len(toks) / dt, cycle_ms=dt / cycles * 1e3 if cycles else None,
        accept_len=len(toks) / cycles if cycles else None,
        draft_forwards_per_cycle=counts["draft"] / cycles if cycles else None,
        accept_len_per_prompt=[t / c if c else None for t, c in zip(per_prompt_tokens, per_prompt_cycles)],
        distinct_tokens=len(set(toks)),
        phases=phases, phase_metric=benchphase.MODE_METRIC.get(a.timing),
    )
    if ph.enabled and a.timing != "torch-profiler" and not phases.get("spec.draft"):
        notes.append("the draft timer never fired")
    log("%d cycles, %d tokens, %.1f tok/s, accept length %.3f, cycle %.2f ms"
        % (cycles, len(toks), res["tok_s"], res["accept_len"] or 0.0, res["cycle_ms"] or 0.0))
    if a.repeat_s > 0:
        with torch.inference_mode():
            res["repeats"] = repeat(a, torch, target, draft, counts, prompts, outs)
        bad = [r for r in res["repeats"] if not r["same"]]
        if bad:
            res["ok"] = False
            res["error"] = "%d of %d repeats generated other tokens than the measured loop" % (
                len(bad), len(res["repeats"]))


def repeat(a, torch, target, draft, counts, prompts, outs):
    """Generates the prompts in turn for --repeat-s seconds; one record per generate with its wall
    clock span (time.time(), the clock of the agent's log lines), so that an outside driver can
    sort the generates into those made with and without a profiler attached."""
    want = [benchphase.token_hash(out[0, ids.shape[1]:].tolist()) for ids, out in zip(prompts, outs)]
    if a.ready_file:
        tmp = a.ready_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % os.getpid())
        os.replace(tmp, a.ready_file)
    log("repeating the %d prompts for %.0f s" % (len(prompts), a.repeat_s))
    recs = []
    end = time.time() + a.repeat_s
    i = 0
    while time.time() < end:
        p = i % len(prompts)
        c = counts["target"]
        t0 = time.time()
        out = assisted(target, draft, torch, prompts[p], a.new_tokens)
        torch.cuda.synchronize()
        t1 = time.time()
        new = out[0, prompts[p].shape[1]:].tolist()
        recs.append({"prompt": p, "t0": t0, "t1": t1, "tokens": len(new), "cycles": counts["target"] - c,
                     "same": benchphase.token_hash(new) == want[p]})
        i += 1
    log("%d repeats" % len(recs))
    return recs


if __name__ == "__main__":
    sys.exit(main())
