"""novaserve: a made-up inference engine no specprof preset knows (see novaserve_demo.py)."""
