"""A transformers-shaped package (5.x module layout) for specprof's conformance workload.
Not Hugging Face code: written after the upstream files named in ../conformance.yaml."""
