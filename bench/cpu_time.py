"""Eager vs xjit on one thread, measured in CPU time of the calling thread: medians of
interleaved rounds, and the largest error relative to eager's largest output.

    PYTHONPATH=build/python python bench/cpu_time.py resnet18/b1,resnet18/b8 [--repeats 9]

On a loaded machine this is the fair figure (wall time there counts the other processes'
slices; docs/perf.md "Method"). It cannot show what a second thread gains. For an A/B of a
backend switch read once per process (XJIT_CONV_WINOGRAD, XJIT_CONV_IM2COL, XJIT_PIPELINE),
run it once per setting and compare the ratios to eager, which each process measures alike.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import xjit  # noqa: E402
from bench.common import interleaved_medians, leaves, thread_time_per_call  # noqa: E402
from bench.models import CASES  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", help="comma list of cases, e.g. resnet18/b1,vit/b1")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--inner", type=int, default=1, help="calls per timing sample")
    args = ap.parse_args()
    torch.set_num_threads(1)
    switches = {k: v for k, v in os.environ.items() if k.startswith("XJIT_")}
    print(f"torch {torch.__version__}, 1 thread, CPU time, medians of {args.repeats}; {switches}")
    for name in args.cases.split(","):
        torch.manual_seed(0)
        model, inputs = CASES[name].build()
        compiled = xjit.jit(model)
        with torch.no_grad():
            want = model(*inputs)
            for _ in range(2):
                got = compiled(*inputs)
            scale = max(w.abs().max().item() for w in leaves(want))
            err = max((g - w).abs().max().item() for g, w in zip(leaves(got), leaves(want)))
            med = interleaved_medians(
                {"eager": lambda: model(*inputs), "xjit": lambda: compiled(*inputs)},
                args.repeats,
                args.inner,
                thread_time_per_call,
            )
        e_ms, x_ms = med["eager"] * 1e3, med["xjit"] * 1e3
        print(
            f"{name}: eager {e_ms:.1f} ms, xjit {x_ms:.1f} ms ({e_ms / x_ms:.2f}x eager), "
            f"max abs error {err:.1e} ({err / scale:.1e} of max |eager|)",
            flush=True,
        )


if __name__ == "__main__":
    main()
