"""Inference under torch.autocast("cpu"): eager f32, xjit f32, eager autocast and xjit under autocast in
one process, interleaved round-robin; medians and spread, and each result's normwise error
against eager f32 (max|out - f32| / max|f32|, worst output).

    python bench/autocast.py bert/b1,resnet18/b8 [--dtype bf16] [--threads 1] [--timer cpu]

Dtypes of xjit's outputs must equal eager autocast's (checked; a mismatch is printed).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import interleave, leaves, load_xjit, thread_time_per_call, time_per_call  # noqa: E402
from bench.models import CASES  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}


def normwise(out: Any, ref: Any) -> float:
    worst = 0.0
    for g, w in zip(leaves(out), leaves(ref), strict=True):
        scale = w.double().abs().max().item()
        worst = max(worst, (g.double() - w.double()).abs().max().item() / (scale or 1.0))
    return worst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", help="comma list of cases, e.g. bert/b1,resnet18/b8")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")
    ap.add_argument("--repeats", type=int, default=11)
    ap.add_argument("--timer", choices=["wall", "cpu"], default="wall")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    xjit = load_xjit()
    timer = thread_time_per_call if args.timer == "cpu" else time_per_call
    low = DTYPES[args.dtype]
    for name in args.cases.split(","):
        model, inputs = CASES[name].build()
        compiled = xjit.jit(model)

        def amp(f: Callable[..., Any]) -> Callable[[], Any]:
            def run() -> Any:
                with torch.autocast("cpu", dtype=low):
                    return f(*inputs)

            return run

        fns = {
            "eager f32": lambda: model(*inputs),
            "xjit f32": lambda: compiled(*inputs),
            "eager amp": amp(model),
            "xjit amp": amp(compiled),
        }
        with torch.no_grad():
            outs = {n: [f() for _ in range(3)][-1] for n, f in fns.items()}
            errors: dict[str, str] = {}
            samples = interleave(fns, args.repeats, 1, errors, timer)
        med = {n: statistics.median(v) * 1e3 for n, v in samples.items()}
        spread = {n: (min(v) * 1e3, max(v) * 1e3) for n, v in samples.items()}
        line = f"{name} {args.dtype} threads={torch.get_num_threads()} timer={args.timer}:"
        for n, ms in med.items():
            line += f"\n  {n:9s} {ms:8.2f} ms [{spread[n][0]:.2f}-{spread[n][1]:.2f}]"
            if n != "eager f32":
                line += f"  err vs f32 {normwise(outs[n], outs['eager f32']):.2e}"
        line += (
            f"\n  xjit amp: {med['eager amp'] / med['xjit amp']:.2f}x eager amp, "
            f"{med['eager f32'] / med['xjit amp']:.2f}x eager f32"
        )
        want = [t.dtype for t in leaves(outs["eager amp"])]
        got = [t.dtype for t in leaves(outs["xjit amp"])]
        if want != got:
            line += f"\n  DTYPE MISMATCH: xjit {got}, eager autocast {want}"
        for n, e in errors.items():
            line += f"\n  {n} failed: {e}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
