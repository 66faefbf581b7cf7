"""Micro-benchmarks: per-call overhead of a tiny function, and compile time against graph size.

    python bench/micro.py --out micro.json [--quick] [--backends eager,inductor,xjit]

Overhead: `x + 1` on a 1-element tensor, backends interleaved round-robin, median per call.
Compile time: first call of a chain of N ops (elementwise: sin/cos/tanh/sigmoid in turn; matmul:
x @ w with a 64x64 orthogonal w), in this process after a warm-up compile, so it measures the
compiler's work on the graph rather than process start-up; caches start empty (run.py points
TORCHINDUCTOR_CACHE_DIR / XJIT_CACHE_DIR at fresh directories) and every graph is new.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from bench.common import COMPILERS, error_text, interleave, make_backend, prepare, setup_threads

ELEMENTWISE = (torch.sin, torch.cos, torch.tanh, torch.sigmoid)


def tiny(x: torch.Tensor) -> torch.Tensor:
    return x + 1


def chain(kind: str, n: int) -> Callable[[torch.Tensor], torch.Tensor]:
    w = torch.linalg.qr(torch.randn(64, 64)).Q

    def elementwise(x: torch.Tensor) -> torch.Tensor:
        for i in range(n):
            x = ELEMENTWISE[i % len(ELEMENTWISE)](x)
        return x

    def matmul(x: torch.Tensor) -> torch.Tensor:
        for _ in range(n):
            x = x @ w
        return x

    return elementwise if kind == "elementwise" else matmul


def overhead(backends: list[str], repeats: int, inner: int) -> dict[str, Any]:
    fns, _, errors = prepare(backends, tiny, (torch.ones(1),))
    samples = interleave(fns, repeats, inner, errors)
    return {
        "overhead_us": {b: statistics.median(s) * 1e6 for b, s in samples.items()},
        "overhead_errors": errors,
    }


def compile_time(backend: str, kind: str, n: int) -> float | str:
    torch._dynamo.reset()
    x = torch.randn(64, 64)
    try:
        fn = make_backend(backend, chain(kind, n))
        start = time.perf_counter()
        fn(x)
        return time.perf_counter() - start
    except Exception as exc:
        return error_text(exc)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--backends", default="eager,inductor,xjit")
    args = parser.parse_args()
    setup_threads()
    torch.manual_seed(0)
    backends = args.backends.split(",")
    with torch.no_grad():
        result = overhead(backends, repeats=5 if args.quick else 15, inner=2000 if args.quick else 10000)
        compilers = [b for b in backends if b in COMPILERS and b in result["overhead_us"]]
        result["compile_s"] = {
            kind: {str(n): {b: compile_time(b, kind, n) for b in compilers} for n in (10, 100, 1000)}
            for kind in ("elementwise", "matmul")
        }
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
