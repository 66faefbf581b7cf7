"""Per-call cost of handing back outputs in eager's layout (a benchmark, not a test).

Eager keeps an input's dim order in elementwise results (`x.t() * 2` comes back transposed) and
channels_last through convolutions; xjit hands back the same strides (docs/frontend.md, *Output
layouts*). Where eager's layout is a permutation of contiguous, the graph computes the output in
that order (`sink-permutes`: the loops read the permuted input in memory order) and returns a
view; before, it computed a contiguous result (a strided gather) and copied it into eager's
strides after the run. Reports, side by side in one process, the median wall time per call
(over repeats) of eager, torch.compile (Inductor) and xjit.jit, and the ratios, 1 thread.

    PYTHONPATH=build/python python bench/output_layouts.py [--calls N] [--repeats R]
        [--no-inductor] [--cases a,b]

`XJIT_PIPELINE=decompose-attention,decompose-batch-norm,layout,fuse,reinplace,plan-memory{in-place=false}`
(the runtime pipeline without sink-permutes) gives the copying path for an A/B run: the graph then
computes the contiguous result and copies it into eager's layout inside the run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import xjit

# The timing loop the hook skips (compiled from a "<...>" file name; see bench/frontend_overhead.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.frontend_overhead import timed  # noqa: E402 - after sys.path

F = torch.nn.functional


def per_call_us(fn: Callable[..., Any], args: tuple[Any, ...], calls: int, repeats: int) -> float:
    fn(*args)  # compile / warm up
    fn(*args)
    samples = [timed(fn, args, calls, time.perf_counter_ns) / calls / 1e3 for _ in range(repeats)]
    return statistics.median(samples)


def cases() -> dict[str, tuple[Callable[..., Any], tuple[torch.Tensor, ...], int]]:
    """name -> (function, inputs, calls per repeat divisor)."""
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(64, 64, 3, padding=1).eval()

    def scale(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    def transposed_scale(x: torch.Tensor) -> torch.Tensor:
        return x.t() * 2

    def transposed_relu_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.relu(x.t()) + y.t()

    def to_nhwc(x: torch.Tensor) -> torch.Tensor:
        return x.permute(0, 2, 3, 1) * 2 + 1

    def channels_last_elementwise(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) + 1

    def conv_relu(x: torch.Tensor) -> torch.Tensor:
        return F.relu(conv(x))

    def transposed_normalize(x: torch.Tensor) -> torch.Tensor:
        return x.t() / x.t().sum(1, keepdim=True)

    cl = torch.channels_last
    return {
        "512x512 x * 2 (contiguous)": (scale, (torch.randn(512, 512),), 20),
        "512x512 x.t() * 2": (transposed_scale, (torch.randn(512, 512),), 20),
        "512x512 relu(x.t()) + y.t()": (
            transposed_relu_add, (torch.randn(512, 512), torch.randn(512, 512)), 20),
        "NCHW->NHWC 8x64x32x32 * 2 + 1": (to_nhwc, (torch.randn(8, 64, 32, 32),), 40),
        "channels_last 8x64x32x32 relu+1": (
            channels_last_elementwise, (torch.randn(8, 64, 32, 32).to(memory_format=cl),), 40),
        "channels_last conv3x3+relu 1x64x56x56": (
            conv_relu, (torch.randn(1, 64, 56, 56).to(memory_format=cl),), 100),
        "512x512 x.t() / x.t().sum(1, keepdim)": (transposed_normalize, (torch.randn(512, 512),), 20),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--no-inductor", action="store_true", help="leave out torch.compile")
    p.add_argument("--cases", default="", help="comma-separated substrings of case names")
    args = p.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    print(f"median us per call over {args.repeats} repeats (1 thread)")
    head = f"{'case':<40}{'eager':>10}{'inductor':>10}{'xjit':>10}{'eager/xjit':>12}{'ind/xjit':>10}"
    print(head)
    wanted = [c for c in args.cases.split(",") if c]
    with torch.no_grad():
        for name, (fn, inputs, divisor) in cases().items():
            if wanted and not any(w in name for w in wanted):
                continue
            calls = max(args.calls // divisor, 10)
            want = fn(*inputs)
            compiled = xjit.jit(fn)
            got = compiled(*inputs)
            assert got.stride() == want.stride(), (name, got.stride(), want.stride())
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
            eager = per_call_us(fn, inputs, calls, args.repeats)
            ours = per_call_us(compiled, inputs, calls, args.repeats)
            inductor = float("nan")
            if not args.no_inductor:
                inductor = per_call_us(torch.compile(fn), inputs, calls, args.repeats)
            print(f"{name:<40}{eager:>10.1f}{inductor:>10.1f}{ours:>10.1f}"
                  f"{eager / ours:>12.2f}{inductor / ours:>10.2f}", flush=True)


if __name__ == "__main__":
    main()
