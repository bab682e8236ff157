"""A stand-in for the few torch pieces the workload mirrors. Deliberately NOT named `torch`, so
it can never shadow a real torch installation; its file paths still end in `torch/cuda/graphs.py`
like torch's, which is what specprof's `graph_replay` detail rule matches."""
