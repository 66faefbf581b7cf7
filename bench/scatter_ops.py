"""Scatter ops as graph neural networks use them: messages of 20000 edges x 64 features summed,
averaged or max-reduced into 5000 nodes (`scatter_add`, `scatter_reduce` mean / amax with
include_self=False) along dim 0 with a per-element index, eager vs xjit (and Inductor with
--inductor), interleaved in one process; median ms per call and the speedup over eager.

    python bench/scatter_ops.py [--repeats 15] [--threads N] [--inductor]

With --threads 1 the timer is the calling thread's CPU time (steadier on a loaded machine).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (  # noqa: E402
    interleave,
    max_errors,
    medians_line,
    prepare,
    thread_time_per_call,
    time_per_call,
)

NODES, EDGES, FEATURES = 5000, 20000, 64


def scatter_sum(x: torch.Tensor, idx: torch.Tensor, msg: torch.Tensor) -> torch.Tensor:
    return x.scatter_add(0, idx, msg)


def scatter_mean(x: torch.Tensor, idx: torch.Tensor, msg: torch.Tensor) -> torch.Tensor:
    return x.scatter_reduce(0, idx, msg, reduce="mean", include_self=False)


def scatter_amax(x: torch.Tensor, idx: torch.Tensor, msg: torch.Tensor) -> torch.Tensor:
    return x.scatter_reduce(0, idx, msg, reduce="amax", include_self=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--inductor", action="store_true")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    timer = thread_time_per_call if args.threads == 1 else time_per_call
    g = torch.Generator().manual_seed(0)
    x = torch.zeros(NODES, FEATURES)
    # Each edge's target node, per feature as scatter takes it (a broadcast row index becomes
    # index_put; this one is the general case).
    idx = torch.randint(0, NODES, (EDGES, FEATURES), generator=g)
    msg = torch.randn(EDGES, FEATURES, generator=g)
    backends = ["eager", "xjit"] + (["inductor"] if args.inductor else [])
    for fn in (scatter_sum, scatter_mean, scatter_amax):
        fns: dict[str, Any]
        with torch.no_grad():
            fns, outputs, errors = prepare(backends, fn, (x, idx, msg))
            samples = interleave(fns, args.repeats, 5, errors, timer)
        line, _ = medians_line(fn.__name__, samples)
        err = max_errors(outputs.get("xjit"), outputs["eager"]) if "xjit" in outputs else {}
        print(line, f"max abs err {err.get('max_abs_err', float('nan')):.1e}",
              *(f"{b} failed: {e}" for b, e in errors.items()))


if __name__ == "__main__":
    main()
