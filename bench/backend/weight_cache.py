"""Module weights reordered once per parameter version vs per call, side by side in one process.

    python bench/backend/weight_cache.py [resnet18/b1,mlp/b64] [--threads 1] [--repeats 15]

Each case's model is compiled twice with xjit.jit: with `weight_cache=True` (the frontend tags
its nn.Parameters by version counter, so oneDNN reorders them once: docs/backend.md "A module's
weights") and with the defaults (reordered per call, or read through their strides by matmul).
Eager runs too, for the ratio the suite reports. Calls are interleaved round-robin; medians over repeats.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import xjit  # noqa: E402
import xjit.ir as ir  # noqa: E402
from bench.common import interleave, leaves, medians_line  # noqa: E402
from bench.models import CASES  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="?", default="resnet18/b1,mlp/b64")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    for name in args.cases.split(","):
        model, inputs = CASES[name].build()
        tagged, untagged = xjit.jit(model, weight_cache=True), xjit.jit(model)
        with torch.no_grad():
            want = model(*inputs)
            for f in (tagged, untagged):
                for _ in range(3):
                    got = f(*inputs)
                for g, w in zip(leaves(got), leaves(want), strict=True):
                    torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
            before = ir.backend_stats()
            fns = {
                "eager": lambda: model(*inputs),
                "per-call reorder": lambda: untagged(*inputs),
                "reorder once": lambda: tagged(*inputs),
            }
            errors: dict[str, str] = {}
            samples = interleave(fns, args.repeats, 1, errors)
            after = ir.backend_stats()
        line, med = medians_line(name, samples)
        once, per_call = med["reorder once"], med["per-call reorder"]
        line += f"; reorder once / per call = {once / per_call:.3f}"
        counts = {k: after[k] - before[k] for k in after if k.startswith("weight_")}
        line += f"; during timing: {counts}"
        for b, e in errors.items():
            line += f"\n  {b} failed: {e}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
