"""Module weights reordered once per parameter version vs per call, side by side in one process.

    python bench/backend/weight_cache.py [resnet18/b1,mlp/b64] [--threads 1] [--repeats 15]

Each case's model is compiled twice with xjit.jit: as built (its weights are nn.Parameters,
which the frontend tags by version counter, so oneDNN reorders them once: docs/backend.md "A
module's weights") and as a copy whose parameters are plain-tensor buffers (untagged: reordered
per call, or read through their strides by matmul: the behaviour before the cache). Eager runs
too, for the ratio the suite reports. Calls are interleaved round-robin; medians over repeats.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import xjit  # noqa: E402
import xjit.ir as ir  # noqa: E402
from bench.common import interleave, leaves  # noqa: E402
from bench.models import CASES  # noqa: E402


def without_parameters(model: nn.Module) -> nn.Module:
    """A copy whose parameters are plain-tensor buffers (same values, no content tags)."""
    plain = copy.deepcopy(model)
    for m in plain.modules():
        for name, p in list(m._parameters.items()):
            if p is not None:
                del m._parameters[name]
                m.register_buffer(name, p.detach().clone())
    return plain


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="?", default="resnet18/b1,mlp/b64")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    for name in args.cases.split(","):
        model, inputs = CASES[name].build()
        plain = without_parameters(model)
        tagged, untagged = xjit.jit(model), xjit.jit(plain)
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
        med = {b: statistics.median(s) * 1e3 for b, s in samples.items()}
        line = f"{name} threads={torch.get_num_threads()}:"
        for b, ms in med.items():
            line += f" {b} {ms:.2f} ms"
            if b != "eager":
                line += f" ({med['eager'] / ms:.2f}x eager)"
        once, per_call = med["reorder once"], med["per-call reorder"]
        line += f"; reorder once / per call = {once / per_call:.3f}"
        counts = {k: after[k] - before[k] for k in after if k.startswith("weight_")}
        line += f"; during timing: {counts}"
        for b, e in errors.items():
            line += f"\n  {b} failed: {e}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
