"""ResNet-18 on one 224x224 image: eager PyTorch vs xjit. The model is the benchmark suite's
(bench/models.py), a plain nn.Module with conv, batch norm and residual adds.

    python examples/resnet.py          (or: python -m xjit examples/resnet.py)
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for bench/
from _compare import compare

from bench.models import ResNet18

compare("ResNet-18, batch 1", ResNet18(), torch.randn(1, 3, 224, 224))
