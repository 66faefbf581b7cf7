"""Benchmark harness and model suite (see bench/run.py)."""
