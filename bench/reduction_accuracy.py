"""Accuracy of f32 reductions over long axes: xjit vs eager, both against float64.

Each case is a function of one f32 tensor (values randn + 3 by default: a nonzero mean is where
a sequential accumulation loses most). It runs under eager PyTorch, under xjit.jit, and in
float64 on the same values; the error of a result is the norm-wise ||y - y64|| / ||y64||, and
the table gives both errors and their ratio (xjit / eager; <= ~1.5 is the goal).

    python bench/reduction_accuracy.py [--cases sum,rowsum,...] [--sizes 1e3,1e5,1e7]
                                       [--offset 3] [--threads 1]
    python bench/reduction_accuracy.py --time   # CPU time per call of the SPEED shapes instead

XJIT_SUM_CASCADE=0 compiles the sums as before session 15 (in order partial sums): run both
ways, alternating, to compare (and XJIT_NO_CACHE=1, so that each run compiles its own kernels).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import xjit  # noqa: E402

F = torch.nn.functional


def _bn_stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x.mean((0, 2, 3)), x.var((0, 2, 3), unbiased=False)


# name -> (shape for a reduced length n, function)
CASES: dict[str, tuple[Callable[[int], tuple[int, ...]], Callable]] = {
    "sum": (lambda n: (n,), lambda x: x.sum()),  # every dim: the parallel chunks
    "rowsum": (lambda n: (4, n), lambda x: x.sum(-1)),  # one long innermost axis
    "mean": (lambda n: (4, n), lambda x: x.mean(-1)),
    "var": (lambda n: (4, n), lambda x: x.var(-1)),
    "colsum": (lambda n: (n // 64, 64), lambda x: x.sum(0)),  # strided axis (lane mode)
    "colsum1k": (lambda n: (n // 1024, 1024), lambda x: x.sum(0)),
    "sum2d": (lambda n: (n // 64, 64), lambda x: x.sum((0, 1))),  # two reduced loops
    "bn_stats": (lambda n: (max(n // 3136, 1), 4, 56, 56), _bn_stats),  # N*H*W per channel
    "bn_stats_cl": (
        lambda n: (max(n // 3136, 1), 56, 56, 16),
        lambda x: _bn_stats(x.permute(0, 3, 1, 2)),
    ),
    "bn_train": (lambda n: (max(n // 3136, 1), 4, 56, 56), lambda x: F.batch_norm(x, None, None, training=True)),
    "softmax": (lambda n: (2, n), lambda x: torch.softmax(x - 3, -1)),
    "layer_norm": (lambda n: (2, n), lambda x: F.layer_norm(x, x.shape[-1:])),
}


# Reduction-heavy shapes of the suite's models (name, shape, function) for --time.
SPEED: list[tuple[str, tuple[int, ...], Callable]] = [
    ("rowsum [64,4096]", (64, 4096), lambda x: x.sum(-1)),
    ("sum [1M]", (1 << 20,), lambda x: x.sum()),
    ("softmax [768,128]", (768, 128), lambda x: torch.softmax(x, -1)),
    ("softmax [12,197,197]", (12, 197, 197), lambda x: torch.softmax(x, -1)),
    ("layer_norm [128,768]", (128, 768), lambda x: F.layer_norm(x, x.shape[-1:])),
    ("bn mean [8,64,56,56]", (8, 64, 56, 56), lambda x: x.mean((0, 2, 3))),
    ("bn var [8,64,56,56]", (8, 64, 56, 56), lambda x: x.var((0, 2, 3))),
    ("bn train [8,64,56,56]", (8, 64, 56, 56), lambda x: F.batch_norm(x, None, None, training=True)),
    ("colsum [4096,1024]", (4096, 1024), lambda x: x.sum(0)),
    ("colsum [25088,64]", (25088, 64), lambda x: x.sum(0)),
]


def time_cases(repeats: int) -> None:
    print(f"{'case':<24} {'xjit us':>9} {'spread':>13} {'eager us':>9}")
    for name, shape, fn in SPEED:
        x = torch.randn(shape) + 3
        compiled = xjit.jit(fn, fullgraph=True, dynamic=False)
        row = []
        for f in (compiled, fn):
            with torch.no_grad():
                for _ in range(3):
                    f(x)
                calls = max(1, int(2e7 // x.numel()))  # about 20M elements per sample
                samples = []
                for _ in range(repeats):
                    t0 = time.process_time()
                    for _ in range(calls):
                        f(x)
                    samples.append((time.process_time() - t0) / calls * 1e6)
            samples.sort()
            row.append((statistics.median(samples), samples[0], samples[-1]))
        (m, lo, hi), (e, _, _) = row
        print(f"{name:<24} {m:>9.1f} {lo:>6.1f}-{hi:<6.1f} {e:>9.1f}", flush=True)


def _flat(y: object) -> torch.Tensor:
    if isinstance(y, torch.Tensor):
        return y.reshape(-1).double()
    return torch.cat([_flat(t) for t in y])  # type: ignore[union-attr]


def rel_err(y: object, ref: object) -> float:
    a, b = _flat(y), _flat(ref)
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


def measure(case: str, n: int, offset: float, seeds: int) -> tuple[float, float]:
    shape_of, fn = CASES[case]
    compiled = xjit.jit(fn, fullgraph=True, dynamic=False)  # static shapes at every size
    ex, ee = [], []
    for seed in range(seeds):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(shape_of(n), generator=g) + offset
        with torch.no_grad():
            ref = fn(x.double())
            ee.append(rel_err(fn(x), ref))
            ex.append(rel_err(compiled(x), ref))
    return statistics.median(ex), statistics.median(ee)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--sizes", default="1e3,1e4,1e5,1e6,1e7")
    p.add_argument("--offset", type=float, default=3.0)
    p.add_argument("--seeds", type=int, default=3, help="inputs per case (median error)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--time", action="store_true", help="time the SPEED shapes instead")
    p.add_argument("--repeats", type=int, default=9, help="--time: samples per case")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    if a.time:
        return time_cases(a.repeats)
    print(f"randn + {a.offset:g}, f32; error = ||y - y64|| / ||y64||, median of {a.seeds} inputs")
    print(f"{'case':<12} {'n':>9} {'xjit':>9} {'eager':>9} {'ratio':>7}")
    for case in a.cases.split(","):
        for s in a.sizes.split(","):
            n = int(float(s))
            ex, ee = measure(case, n, a.offset, a.seeds)
            ratio = ex / ee if ee > 0 else float("inf") if ex > 0 else 1.0
            print(f"{case:<12} {n:>9} {ex:>9.2e} {ee:>9.2e} {ratio:>7.2f}", flush=True)


if __name__ == "__main__":
    main()
