"""Python floats as graph inputs (a benchmark, not a test; docs/perf.md session 19).

Two figures, each measured side by side in one process, one thread, CPU time of the calling
thread (medians of interleaved repeats, with the spread):

  repro     the scale-from-.item() frame of the brief (`s = x.abs().max().item()` then
            `torch.relu(x / s) * 2 + s`), a new float at every call: compiles, calls run in
            Python and the steady per-call time with `dynamic=None` (the float becomes a graph
            input after it changed once) against `dynamic=False` (guarded by value, as every
            float was before: it recompiles up to the limit, then runs in Python) and eager.
  overhead  `x * s + 1` with a float input `s` against `x * 0.5 + 1` (a constant) on a small
            tensor: what reading a float input costs per call (its guard, the 0-d carrier, the
            `item` op).

    python bench/float_inputs.py [--calls N] [--repeats R]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import xjit  # noqa: E402
import xjit._frontend as fe  # noqa: E402
from bench.common import interleave, thread_time_per_call  # noqa: E402


def repro(x: torch.Tensor) -> torch.Tensor:
    s = x.abs().max().item()  # a graph break: s is a Python float, new at every call
    return torch.relu(x / s) * 2 + s


def scaled(x: torch.Tensor, s: float) -> torch.Tensor:
    return x * s + 1


def constant(x: torch.Tensor, s: float) -> torch.Tensor:
    return x * 0.5 + 1


def counts_after(fn: Callable[..., Any], inputs: list[torch.Tensor]) -> dict[str, int]:
    """Compiles and calls run in Python over `inputs` with a fresh frontend."""
    fe.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for x in inputs:
            fn(x)
    c = fe.events()["counters"]
    return {k: c[k] for k in ("compiles", "frames_in_python", "cache_hits")}


def summary(samples: list[float]) -> str:
    us = sorted(v * 1e6 for v in samples)
    return f"{statistics.median(us):8.2f} us/call (median; min {us[0]:.2f}, max {us[-1]:.2f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200, help="calls per timing sample")
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    inputs = [torch.randn(64) for _ in range(64)]  # each call a new float s

    new, old = xjit.jit(repro), xjit.jit(repro, dynamic=False)
    print(f"repro over {len(inputs)} values: dynamic=None {counts_after(new, inputs)}")
    print(f"repro over {len(inputs)} values: dynamic=False {counts_after(old, inputs)}")
    for x in inputs:  # same results (the floats of the compiled and eager calls are equal)
        assert torch.equal(new(x), repro(x)), "dynamic=None differs from eager"

    def cycle(fn: Callable[..., Any]) -> Callable[[], Any]:
        state = {"i": 0}

        def call() -> Any:
            state["i"] = (state["i"] + 1) % len(inputs)
            return fn(inputs[state["i"]])

        return call

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fns = {"eager": cycle(repro), "dynamic=None": cycle(new), "dynamic=False": cycle(old)}
        for f in fns.values():
            for _ in range(len(inputs)):
                f()
        samples = interleave(fns, args.repeats, args.calls, {}, thread_time_per_call)
    for name, v in samples.items():
        print(f"repro {name:14s} {summary(v)}")

    x = torch.randn(64)
    floats = [0.25 + i / 8 for i in range(16)]
    f_in, f_const = xjit.jit(scaled), xjit.jit(constant)
    for s in floats:  # compile: the float is an input after its first change
        f_in(x, s), f_const(x, s)
    for s in floats:
        assert torch.equal(f_in(x, s), scaled(x, s))
    state = {"i": 0}

    def next_float() -> float:
        state["i"] = (state["i"] + 1) % len(floats)
        return floats[state["i"]]

    fns = {
        "float input": lambda: f_in(x, next_float()),
        "constant": lambda: f_const(x, next_float()),
    }
    samples = interleave(fns, args.repeats, args.calls * 10, {}, thread_time_per_call)
    for name, v in samples.items():
        print(f"overhead {name:12s} {summary(v)}")
    med = {k: statistics.median(v) * 1e6 for k, v in samples.items()}
    print(f"float input - constant: {med['float input'] - med['constant']:.2f} us/call (medians)")


if __name__ == "__main__":
    main()
