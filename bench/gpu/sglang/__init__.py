"""SGLang-shaped package for bench/gpu/spec_loop.py --worker sglang: the file layout and qualified
names of real SGLang (sglang/srt/...), so that specprof's sglang-eagle preset names the phases of a
real torch loop. Not SGLang itself: only the decode path of the spec v1 EAGLE worker."""
