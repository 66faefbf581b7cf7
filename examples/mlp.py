"""A 3-layer MLP, batch 64: eager PyTorch vs xjit.

    python examples/mlp.py          (or: python -m xjit examples/mlp.py)
"""

import torch
from _compare import compare
from torch import nn

model = nn.Sequential(
    nn.Linear(784, 2048), nn.ReLU(),
    nn.Linear(2048, 2048), nn.ReLU(),
    nn.Linear(2048, 10),
)
compare("MLP, batch 64", model, torch.randn(64, 784))
