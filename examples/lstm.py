"""An LSTM language model written as a Python loop over 64 time steps (bench/models.py):
eager PyTorch vs xjit. The loop is ordinary Python; xjit captures it from the bytecode.

    python examples/lstm.py          (or: python -m xjit examples/lstm.py)
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for bench/
from _compare import compare

from bench.models import LSTMLM

model = LSTMLM()
compare("LSTM LM, 64 steps", model, torch.randint(0, 10000, (1, 64)))
