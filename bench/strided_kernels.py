"""Kernels whose inputs are permuted views: reductions over a transposed input (the loop order
follows the input's strides, docs/backend.md "Reduction kernels") and copies of a transposed
input (in-graph `contiguous`, e.g. the output of index_fill on a transposed input), eager vs xjit
(and torch.compile with --inductor), side by side in one process, 1 thread, median of
interleaved repeats of the calling thread's CPU time (fair on a loaded machine).

    XJIT_NUM_THREADS=1 python bench/strided_kernels.py [--repeats 15] [--inner 20] [--inductor]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ.setdefault("XJIT_NUM_THREADS", "1")

import torch

from bench.common import kernel_cases_main


def cases() -> dict[str, tuple]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 256, 256, generator=g)
    m = torch.randn(512, 512, generator=g)
    big = torch.randn(2048, 2048, generator=g)
    idx = torch.tensor([1, 5, 9])
    return {
        "x.permute(0,2,1).sum(0).t() * 2": (lambda a: a.permute(0, 2, 1).sum(0).t() * 2, (x,)),
        "x.permute(0,2,1).amax(0)": (lambda a: a.permute(0, 2, 1).amax(0), (x,)),
        "x.permute(0,2,1).var(0)": (lambda a: a.permute(0, 2, 1).var(0), (x,)),
        "x.permute(0,2,1).mean(1)": (lambda a: a.permute(0, 2, 1).mean(1), (x,)),
        "x.permute(1,2,0).sum(2)": (lambda a: a.permute(1, 2, 0).sum(2), (x,)),
        "m.t().index_fill(0, idx, 0) [512x512]": (lambda a, i: a.t().index_fill(0, i, 0.0), (m, idx)),
        "m.t().contiguous() [512x512]": (lambda a: a.t().contiguous(), (m,)),
        "m.t().contiguous() * 2 [512x512]": (lambda a: a.t().contiguous() * 2, (m,)),
        "b.t().contiguous() [2048x2048]": (lambda a: a.t().contiguous(), (big,)),
    }


if __name__ == "__main__":
    kernel_cases_main(cases())
