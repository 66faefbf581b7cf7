"""Dynamic shapes: what one symbolic capture costs against one static capture per shape.

ResNet-18 (bench/models.py, 1000 classes, batch 1) at image sizes 64, 96 and 112, side by side
in one process: eager, xjit with `dynamic=False` (one compile per size, static shapes: memory
plan, shape-specialized kernels) and xjit with `dynamic=True` (one compile for every size:
symbolic dims, kernels read sizes at run time, no static memory plan). Prints the median time
per call of each at each size (samples interleaved round-robin) and the compile counts.

    python bench/dynamic_shapes.py [--repeats 7] [--inner 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import interleave, load_xjit, setup_threads  # noqa: E402
from bench.models import ResNet18  # noqa: E402

SIZES = (64, 96, 112)


def compare(
    model: torch.nn.Module,
    inputs: dict[int, torch.Tensor],
    label: str,
    repeats: int,
    inner: int,
    main_output: Callable[[Any], torch.Tensor] = lambda out: out,
) -> None:
    """Eager, xjit static (one compile per size) and xjit dynamic (one compile) on `inputs`
    (by size, named `label`) side by side: median ms per call at each size, compile counts and
    the time of the first calls; outputs are checked against eager first."""
    xjit = load_xjit()
    fe = sys.modules["xjit._frontend"]
    variants = {
        "eager": model,
        "static": xjit.jit(model, dynamic=False),
        "dynamic": xjit.jit(model, dynamic=True),
    }
    compiles: dict[str, int] = {}
    compile_s: dict[str, float] = {}
    with torch.no_grad():
        for name, fn in variants.items():
            before = fe.events()["counters"]["compiles"]
            start = time.perf_counter()
            for x in inputs.values():
                fn(x)
            compile_s[name] = time.perf_counter() - start
            compiles[name] = fe.events()["counters"]["compiles"] - before
            for size, x in inputs.items():  # outputs agree with eager
                err = (main_output(fn(x)) - main_output(model(x))).abs().max().item()
                assert err < 1e-3, f"{name} at {size}: max abs error {err}"
        print(
            f"{label:>5} "
            + " ".join(f"{n + ' ms':>11}" for n in variants)
            + "  dynamic/static"
        )
        for size, x in inputs.items():
            fns = {n: (lambda f=f, x=x: f(x)) for n, f in variants.items()}
            errors: dict[str, str] = {}
            samples = interleave(fns, repeats, inner, errors)
            med = {n: statistics.median(v) * 1e3 for n, v in samples.items()}
            cells = " ".join(f"{med[n]:11.2f}" for n in variants)
            print(f"{size:5d} {cells}  {med['dynamic'] / med['static']:.2f}x")
    print(f"compiles over the {len(inputs)} {label}s:", compiles)
    print(
        f"first calls (capture + compile + run) over the {len(inputs)} {label}s, s:",
        {n: round(v, 2) for n, v in compile_s.items()},
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--inner", type=int, default=3)
    a = p.parse_args()
    setup_threads()
    torch.manual_seed(0)
    model = ResNet18().eval()
    compare(
        model, {s: torch.randn(1, 3, s, s) for s in SIZES}, "size", a.repeats, a.inner
    )


if __name__ == "__main__":
    main()
