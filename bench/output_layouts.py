"""Per-call cost of handing back outputs in eager's layout (a benchmark, not a test).

A compiled frame whose output eager lays out as the graph computes it (contiguous) pays one
stride comparison per output; one whose output eager keeps permuted (`x.t() * 2`: TensorIterator
keeps the input's dim order) is copied into that layout after the graph runs unless the graph
already made it so (docs/frontend.md, *Output layouts*). Reports, side by side in one process,
the median wall time per call (over repeats) of eager and xjit.jit for both, at two sizes.

    PYTHONPATH=build/python python bench/output_layouts.py [--calls N] [--repeats R]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import xjit

# The timing loop the hook skips (compiled from a "<...>" file name; see bench/frontend_overhead.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.frontend_overhead import timed  # noqa: E402 - after sys.path


def scale(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def per_call_us(fn: Callable[..., Any], args: tuple[Any, ...], calls: int, repeats: int) -> float:
    fn(*args)  # compile / warm up
    fn(*args)
    samples = [timed(fn, args, calls, time.perf_counter_ns) / calls / 1e3 for _ in range(repeats)]
    return statistics.median(samples)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args()
    torch.set_num_threads(1)
    print(f"median us per call over {args.repeats} repeats of {args.calls} calls (1 thread)")
    print(f"{'case':<28}{'eager':>10}{'xjit':>10}")
    for n in (8, 512):
        contiguous = torch.randn(n, n)
        transposed = torch.randn(n, n).t()
        calls = args.calls if n <= 64 else max(args.calls // 20, 20)
        for name, x in (("contiguous", contiguous), ("transposed (permuted out)", transposed)):
            eager = per_call_us(scale, (x,), calls, args.repeats)
            compiled = per_call_us(xjit.jit(scale), (x,), calls, args.repeats)
            out = xjit.jit(scale)(x)
            assert out.stride() == scale(x).stride()
            print(f"{f'{n}x{n} {name}':<28}{eager:>10.2f}{compiled:>10.2f}")


if __name__ == "__main__":
    main()
