"""Dynamic shapes, op by op: compiles per new input size for ops whose sizes come from symbolic
dims (narrow, repeat, unflatten, split, chunk, reshape with -1, slices past the dim).

Each function is called on `--sizes` inputs whose dims all differ, under `dynamic=True` and
`dynamic=None` (automatic) and `dynamic=False`, in one process; prints the compiles, the graph
breaks, the frames that ran in Python (fallbacks), the xjit warnings (internal errors) and the total time of those
first calls, with every output checked against eager. The last column times one call of an
already-compiled size (median of interleaved samples), dynamic against `dynamic=False`.

    python bench/dynamic_ops.py [--sizes 6] [--repeats 7] [--inner 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import interleave, load_xjit, setup_threads  # noqa: E402


def narrow(x: torch.Tensor) -> torch.Tensor:
    return x.narrow(1, 1, x.shape[1] - 2) * 2


def repeat(x: torch.Tensor) -> torch.Tensor:
    return x.repeat(2, x.shape[0]) + 1


def unflatten(x: torch.Tensor) -> torch.Tensor:
    return x.unflatten(1, (x.shape[0], -1)) * 3


def split(x: torch.Tensor) -> list[torch.Tensor]:
    return [t * 2 for t in torch.split(x, [2, x.shape[1] - 2], dim=1)]


def chunk(x: torch.Tensor) -> list[torch.Tensor]:
    a, b = x.chunk(2, dim=1)
    return [a * 2, b + 1]


def reshape(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(x.shape[0], -1, 2) * 2


def slice_past(x: torch.Tensor) -> torch.Tensor:
    n = x.shape[0]
    return x[:, :n] * 2  # past x.shape[1] for some sizes: eager clamps


# Inputs (rows, cols) for call i: cols a multiple of rows (unflatten's -1), even (reshape's -1).
def shape_of(i: int) -> tuple[int, int]:
    rows = 3 + i
    return rows, rows * (2 + i % 3) * 2


def slice_shape_of(i: int) -> tuple[int, int]:
    rows = 3 + 2 * i
    return rows, rows - 2 if i % 2 else rows + 4  # every other call past the dim


CASES: list[tuple[Callable[..., Any], Callable[[int], tuple[int, int]]]] = [
    (narrow, shape_of),
    (repeat, shape_of),
    (unflatten, shape_of),
    (split, shape_of),
    (chunk, shape_of),
    (reshape, shape_of),
    (slice_past, slice_shape_of),
]


def same(a: Any, b: Any) -> bool:
    if isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return bool(a.shape == b.shape and torch.allclose(a, b))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, default=6)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--inner", type=int, default=20)
    a = p.parse_args()
    setup_threads()
    xjit = load_xjit()
    fe = sys.modules["xjit._frontend"]
    torch.manual_seed(0)
    print(
        f"{'op':<11} {'mode':<8} {'compiles':>8} {'breaks':>6} {'in Python':>9} {'warnings':>8}"
        f" {'first calls s':>13}  steady dynamic/static"
    )
    for f, shape in CASES:
        inputs = [torch.randn(*shape(i)) for i in range(a.sizes)]
        compiled: dict[str, Any] = {}
        for mode, dynamic in (("True", True), ("None", None), ("False", False)):
            fe.reset()
            fn = xjit.jit(f, dynamic=dynamic)
            compiled[mode] = fn
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", xjit.XjitWarning)
                start = time.perf_counter()
                for x in inputs:
                    assert same(fn(x), f(x)), f"{f.__name__} dynamic={mode}: differs from eager"
                seconds = time.perf_counter() - start
            events = fe.events()
            c = events["counters"]
            ratio = ""
            if mode == "False":
                x = inputs[-1]
                for m in ("True", "False"):  # compiled again: fe.reset() dropped the first
                    compiled[m](x)
                samples = interleave(
                    {m: (lambda g=compiled[m]: g(x)) for m in ("True", "False")},
                    a.repeats,
                    a.inner,
                    {},
                )
                med = {m: statistics.median(v) for m, v in samples.items()}
                ratio = f"{med['True'] / med['False']:.2f}x ({med['False'] * 1e6:.0f} us static)"
            print(
                f"{f.__name__:<11} {mode:<8} {c['compiles']:>8} {len(events['breaks']):>6}"
                f" {c['frames_in_python']:>9}"
                f" {len(caught):>8} {seconds:>13.2f}  {ratio}"
            )


if __name__ == "__main__":
    main()
