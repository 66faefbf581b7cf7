"""PyTorch's bf16 matmul precision: eager and xjit under torch.set_float32_matmul_precision("medium").

Eager then runs f32 products in bf16 (AMX / AVX512-BF16); xjit marks them (bf16-products) and
converts their operands. Per case, interleaved medians of: eager at "highest" and "medium", xjit
at "medium" without and with `weight_cache=True` (weights converted once per parameter version),
and the max error of each "medium" run against float64 next to eager's. The precision is set
before each backend's first call (an entry captured at "highest" keeps exact products).

Usage: python bench/matmul_precision.py [--cases bert/b1,gpt2/b1,mlp/b64] [--repeats 7]
Figures go to docs/perf.md ("Matmul precision").
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import describe_machine, interleave, leaves, load_xjit, setup_threads  # noqa: E402
from bench.models import CASES  # noqa: E402


def _first(out: Any) -> torch.Tensor:
    return leaves(out)[0]


def _rel_err(got: torch.Tensor, ref: torch.Tensor) -> float:
    return float((got.double() - ref).abs().max() / ref.abs().max())


def run_case(name: str, repeats: int, xjit: Any) -> str:
    model, inputs = CASES[name].build()
    with torch.no_grad():
        wide = [i.double() if i.is_floating_point() else i for i in inputs]
        ref = _first(model.double()(*wide)).detach()
        model.float()
        torch.set_float32_matmul_precision("highest")
        eager_exact = _first(model(*inputs))
        torch.set_float32_matmul_precision("medium")
        fns: dict[str, Callable[[], Any]] = {}
        errs: dict[str, float] = {"eager": _rel_err(_first(model(*inputs)), ref)}
        for label, cache in (("xjit", False), ("xjit+wc", True)):
            compiled = xjit.jit(model, weight_cache=cache)
            for _ in range(3):
                out = compiled(*inputs)
            errs[label] = _rel_err(_first(out), ref)
            fns[label] = lambda c=compiled: c(*inputs)
        fns["eager"] = lambda: model(*inputs)

        def eager_highest() -> Any:
            torch.set_float32_matmul_precision("highest")
            try:
                return model(*inputs)
            finally:
                torch.set_float32_matmul_precision("medium")

        fns["eager@highest"] = eager_highest
        errors: dict[str, str] = {}
        samples = interleave(fns, repeats, 1, errors)
        torch.set_float32_matmul_precision("highest")
    if errors:
        return f"| {name} | failed: {errors} |"
    med = {k: sorted(v)[len(v) // 2] * 1e3 for k, v in samples.items()}
    e = med["eager"]
    exact_err = _rel_err(eager_exact, ref)
    return (
        f"| {name} | {med['eager@highest']:.1f} | {e:.1f} | {med['xjit']:.1f} ({e / med['xjit']:.2f}x) "
        f"| {med['xjit+wc']:.1f} ({e / med['xjit+wc']:.2f}x) | {exact_err:.1e} | {errs['eager']:.1e} "
        f"| {errs['xjit']:.1e} | {errs['xjit+wc']:.1e} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="bert/b1,gpt2/b1,llama/b1,mlp/b64")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    setup_threads()
    xjit = load_xjit()
    machine = describe_machine()
    print(f"machine: {machine.get('cpu', '?')}, {torch.get_num_threads()} threads")
    print(
        "| case | eager highest ms | eager medium ms | xjit medium ms (vs eager medium) "
        "| xjit+weight_cache ms | rel err eager highest | eager medium | xjit | xjit+wc |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.cases.split(","):
        print(run_case(name, args.repeats, xjit), flush=True)


if __name__ == "__main__":
    main()
