"""A miniature of SGLang's package layout (python/sglang), driving a simulated GPU.

File paths and qualified names of the functions on the speculative-decoding path match real
SGLang spec v1 (EAGLEWorker), so that specprof's sglang preset, which matches co_qualname /
co_name and the file regex `sglang/srt/`, sees the same frames it sees on a real server. See
testdata/workloads/README.md.
"""
