"""Package of the sglang main conformance workload (see workload.py)."""
