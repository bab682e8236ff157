"""Self-check of the oracle (sglang_demo.py --self-check): at every driver/NCCL call, walk the
calling thread's Python frames innermost-out, apply the sglang EAGLE preset of
shared/reference/targets.md §5.1 (co_qualname regexes on 3.11+, co_name + file basename on
3.10), and compare the phase with the thread's current tag. A mismatch means the tags and the
frames disagree, i.e. the oracle would be wrong for specprof."""

import os
import re
import sys
import threading

import fakecuda

FILE_RE = re.compile(r"sglang/srt/")

# (phase, qualname regex) — innermost matching frame wins; first matching rule for a frame.
QUALNAME_RULES = [
    ("spec.accept", r"^(EagleVerifyInput(V2Mixin)?)\.(verify|sample)$"),
    ("spec.verify", r"^(EAGLEWorker|EAGLEWorkerV2|MultiLayerEagleWorker(V2)?|StandaloneWorkerV2)"
                    r"\.verify$|^EagleVerifyInputV2Mixin\.prepare_for_v2_verify$"),
    ("spec.draft_extend", r"^(EAGLEWorker|MultiLayerEagleWorker)\.forward_draft_extend_after_decode$"
                          r"|^EagleDraftWorker\._draft_extend_for_decode$"
                          r"|^(MultiLayer)?EAGLEDraftExtend(Cuda|Npu)GraphRunner\.replay$"
                          r"|^EAGLEWorker\.capture_for_decode$"),
    ("spec.draft", r"^(EAGLEWorker|EagleDraftWorker|MultiLayerEagleWorker)\.(draft|draft_forward|"
                   r"_draft_preprocess_decode|_draft_preprocess_idle)$"
                   r"|^EAGLEDraft(Cuda|Npu)GraphRunner\.replay$"
                   r"|^EagleDraftInputV2Mixin\.prepare_for_v2_draft$|^build_tree_kernel_efficient$"),
    ("spec.prefill", r"^(EAGLEWorker|MultiLayerEagleWorker)\.forward_(target|draft)_extend$"
                     r"|^EagleDraftWorker\._draft_extend_for_prefill$"),
    ("spec.cycle_other", r"^(EAGLEWorker|EAGLEWorkerV2|MultiLayerEagleWorker|"
                         r"MultiLayerEagleWorkerV2|StandaloneWorkerV2|NGRAMWorker)"
                         r"\.forward_batch_generation$"),
    ("sched.result", r"(^|\.)process_batch_result(_decode|_prefill|_idle)?$"),
    ("sched.metrics", r"(^|\.)log_(decode|prefill)_stats$"),
    ("sched.batch", r"^Scheduler\.(get_next_batch_to_run|update_running_batch|"
                    r"get_new_batch_prefill)$|^ScheduleBatch\.prepare_for_decode$"),
    ("sched.recv", r"^Scheduler\.(recv_requests|process_input_requests)$"),
    ("sched.run_other", r"^Scheduler\.run_batch$"),
    ("sched.loop", r"^Scheduler\.event_loop_"),
]
QUALNAME_RULES = [(ph, re.compile(rx)) for ph, rx in QUALNAME_RULES]

# Python 3.10: (phase, co_name regex, file basename regex).
NAME_RULES = [
    ("spec.accept", r"^verify$", r"^eagle_(info|utils)\.py$"),
    ("spec.accept", r"^sample$", r"^eagle_info(_v2)?\.py$"),
    ("spec.verify", r"^verify$", r"^(eagle_worker(_v2)?|multi_layer_eagle_worker\w*)\.py$"),
    ("spec.verify", r"^prepare_for_v2_verify$", r"^eagle_info_v2\.py$"),
    ("spec.draft_extend", r"^forward_draft_extend_after_decode$",
     r"^(eagle_worker|multi_layer_eagle_worker)\.py$"),
    ("spec.draft_extend", r"^_draft_extend_for_decode$", r"^eagle_worker_v2\.py$"),
    ("spec.draft_extend", r"^replay$", r"eagle_draft_extend_cuda_graph_runner\.py$"),
    ("spec.draft_extend", r"^capture_for_decode$", r"^eagle_worker\.py$"),
    ("spec.draft", r"^(draft|draft_forward|_draft_preprocess_decode|_draft_preprocess_idle)$",
     r"^(eagle_worker\w*|multi_layer_eagle_worker\w*)\.py$"),
    ("spec.draft", r"^replay$", r"^eagle_draft_cuda_graph_runner\.py$"),
    ("spec.draft", r"^prepare_for_v2_draft$", r"^eagle_info_v2\.py$"),
    ("spec.draft", r"^build_tree_kernel_efficient$", r"^eagle_utils\.py$"),
    ("spec.prefill", r"^(forward_target_extend|forward_draft_extend)$", r"^eagle_worker\.py$"),
    ("spec.prefill", r"^_draft_extend_for_prefill$", r"^eagle_worker_v2\.py$"),
    ("spec.cycle_other", r"^forward_batch_generation$",
     r"^(eagle_worker\w*|multi_layer_eagle_worker\w*|standalone_worker\w*|ngram_worker)\.py$"),
    ("sched.result", r"^process_batch_result(_decode|_prefill|_idle)?$", r""),
    ("sched.metrics", r"^log_(decode|prefill)_stats$", r""),
    ("sched.batch", r"^(get_next_batch_to_run|update_running_batch|get_new_batch_prefill)$",
     r"^scheduler\.py$"),
    ("sched.batch", r"^prepare_for_decode$", r"^schedule_batch\.py$"),
    ("sched.recv", r"^(recv_requests|process_input_requests)$", r"^scheduler\.py$"),
    ("sched.run_other", r"^run_batch$", r"^scheduler\.py$"),
    ("sched.loop", r"^event_loop_", r"^scheduler\.py$"),
]
NAME_RULES = [(ph, re.compile(n), re.compile(f)) for ph, n, f in NAME_RULES]

HAS_QUALNAME = sys.version_info >= (3, 11)

_cache = {}
_lock = threading.Lock()
mismatches = []
checked = [0]


def _phase_of_code(code):
    ph = _cache.get(code, False)
    if ph is not False:
        return ph
    ph = None
    fname = code.co_filename.replace(os.sep, "/")
    if FILE_RE.search(fname):
        if HAS_QUALNAME:
            qn = code.co_qualname
            for p, rx in QUALNAME_RULES:
                if rx.search(qn):
                    ph = p
                    break
        else:
            base = fname.rsplit("/", 1)[-1]
            for p, nrx, frx in NAME_RULES:
                if nrx.search(code.co_name) and frx.search(base):
                    ph = p
                    break
    _cache[code] = ph
    return ph


def phase_of_stack(frame):
    while frame is not None:
        ph = _phase_of_code(frame.f_code)
        if ph is not None:
            return ph
        frame = frame.f_back
    return "other"


def _on_call(api, tag):
    ph = phase_of_stack(sys._getframe(2))
    checked[0] += 1
    if ph != tag:
        with _lock:
            if len(mismatches) < 20:
                f = sys._getframe(2)
                stack = []
                while f is not None:
                    c = f.f_code
                    stack.append(getattr(c, "co_qualname", c.co_name))
                    f = f.f_back
                mismatches.append({"api": api, "tag": tag, "preset": ph, "stack": stack})
            else:
                mismatches.append(None)


def install():
    fakecuda.on_call = _on_call


def report():
    return {"checked": checked[0], "mismatches": len(mismatches),
            "examples": [m for m in mismatches if m is not None][:5]}
