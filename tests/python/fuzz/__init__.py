"""Differential fuzzing of xjit against eager PyTorch: random programs (programs.py), their
comparison and reduction (differential.py), the CLI (__main__.py, `python -m fuzz`)."""
