"""What a graph break in the middle of a frame costs per call (a benchmark, not a test).

Three functions on a 1-element tensor, run side by side in one process (medians over repeats):
  eager      broken(x) in plain PyTorch
  whole      whole(x) = (x + 1) * 2 compiled: one graph, no break
  broken     broken(x): the same ops around a call xjit cannot capture (os.getpid(), whose int
             result is the same on every call, so no recompiles): the graph before the break,
             the break code running the call in Python, the resume function's graph
The difference broken - whole is the price of the break: two guard checks and graph runs
instead of one, the break code and resume function calls, rebuilding the stack and locals.

    PYTHONPATH=build-<you>/python python bench/frontend_breaks.py [--calls N] [--repeats R]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

import xjit


def whole(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    return y * 2


def broken(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    os.getpid()  # a graph break
    return y * 2


# The timing loop comes from a "<...>" file so the hook does not compile it as a root.
_NS: dict[str, Any] = {}
exec(
    compile(
        "def loop(fn, x, calls):\n    for _ in range(calls):\n        fn(x)\n",
        "<frontend_breaks loop>",
        "exec",
    ),
    _NS,
)
loop: Callable[[Callable[..., Any], torch.Tensor, int], None] = _NS["loop"]


def per_call_us(fn: Callable[..., Any], x: torch.Tensor, calls: int) -> float:
    t0 = time.perf_counter()
    loop(fn, x, calls)
    return (time.perf_counter() - t0) / calls * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args()
    x = torch.ones(1)
    fns = {
        "eager": broken,
        "whole": xjit.jit(whole, backend="interp"),
        "broken": xjit.jit(broken, backend="interp"),
    }
    report = xjit.explain(broken, backend="interp")(x)
    assert report.graph_count == 2 and report.graph_breaks[0].resumed, str(report)
    for fn in fns.values():  # compile and warm up
        loop(fn, x, 50)
    times: dict[str, list[float]] = {k: [] for k in fns}
    with torch.no_grad():
        for _ in range(args.repeats):
            for name, fn in fns.items():  # interleaved: load changes hit all alike
                times[name].append(per_call_us(fn, x, args.calls))
    med = {k: statistics.median(v) for k, v in times.items()}
    low = {k: min(v) for k, v in times.items()}
    for k in fns:
        print(f"{k:7s} {med[k]:7.2f} us/call (median of {args.repeats}), min {low[k]:7.2f}")
    print(
        f"break cost (broken - whole): {med['broken'] - med['whole']:.2f} us/call median, "
        f"{low['broken'] - low['whole']:.2f} us/call between the minima"
    )


if __name__ == "__main__":
    main()
