"""Package of the sglang v0.5 conformance workload (see workload.py)."""
