"""Package of the sglang main conformance workload."""
