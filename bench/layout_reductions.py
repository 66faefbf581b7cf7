"""Reductions whose loops depend on layout: graph inputs given transposed or channels_last
(their `unit_dim` hint, docs/frontend.md) and reductions over or keeping a trailing run of dims
(collapse-reduced-dims, docs/passes.md), eager vs xjit (and torch.compile with --inductor), side
by side in one process, 1 thread, median of interleaved repeats of the calling thread's CPU time
(fair on a loaded machine).

    XJIT_NUM_THREADS=1 python bench/layout_reductions.py [--repeats 15] [--inner 20] [--inductor]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ.setdefault("XJIT_NUM_THREADS", "1")

import torch
import torch.nn.functional as F

from bench.common import kernel_cases_main


def cases() -> dict[str, tuple]:
    g = torch.Generator().manual_seed(0)
    xt = torch.randn(768, 1024, generator=g).t()  # [1024, 768], unit stride in dim 0
    cl = torch.randn(8, 64, 56, 56, generator=g).contiguous(memory_format=torch.channels_last)
    x56 = torch.randn(8, 64, 56, 56, generator=g)
    x28 = torch.randn(8, 64, 28, 28, generator=g)
    x14 = torch.randn(8, 256, 14, 14, generator=g)
    x7 = torch.randn(8, 512, 7, 7, generator=g)
    w, b = torch.ones(768), torch.zeros(768)
    return {
        # transposed / channels_last graph inputs
        "xt.sum(0) [1024x768 transposed]": (lambda a: a.sum(0), (xt,)),
        "layer_norm(xt) [1024x768 transposed]": (lambda a: F.layer_norm(a, (768,), w, b), (xt,)),
        "xt * 2 [1024x768 transposed]": (lambda a: a * 2, (xt,)),
        "cl.mean((2,3)) [8,64,56,56 channels_last]": (lambda a: a.mean((2, 3)), (cl,)),
        # trailing runs of reduced dims
        "x.mean((2,3)) [8,64,56,56]": (lambda a: a.mean((2, 3)), (x56,)),
        "x.sum((0,2,3)) [8,64,56,56]": (lambda a: a.sum((0, 2, 3)), (x56,)),
        "relu(x).mean((2,3)) [8,256,14,14]": (lambda a: torch.relu(a).mean((2, 3)), (x14,)),
        "x.var((2,3)) [8,64,28,28]": (lambda a: a.var((2, 3)), (x28,)),
        "adaptive_avg_pool2d(x, 1) [8,512,7,7]": (lambda a: F.adaptive_avg_pool2d(a, 1), (x7,)),
        # trailing runs of kept dims
        "x.sum(1) [8,64,56,56]": (lambda a: a.sum(1), (x56,)),
        "x.mean(1, keepdim=True) [8,64,28,28]": (lambda a: a.mean(1, keepdim=True), (x28,)),
        "x.amax(1) [8,256,14,14]": (lambda a: a.amax(1), (x14,)),
    }


if __name__ == "__main__":
    kernel_cases_main(cases(), no_grad=True)
