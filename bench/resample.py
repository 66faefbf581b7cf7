"""Linear resampling (F.interpolate bilinear/trilinear) under xjit.jit against eager, in one
process with interleaved repeats: the forward under no_grad, and a forward + backward step
(the input needs a gradient). Per call: median [10th-90th percentile] of wall time and of the
process's CPU time (all threads).

    python bench/resample.py [--threads 1] [--repeats 30]
"""

from __future__ import annotations

import argparse
import sys
import types
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench.*, when run as a script
import xjit  # noqa: E402
from bench.max_pool_backward import interleaved  # noqa: E402  (wall and CPU time, interleaved)

F = torch.nn.functional

# (name, input shape, F.interpolate keyword arguments)
CASES = [
    ("bilinear 32->128", (1, 256, 32, 32), {"size": (128, 128), "mode": "bilinear"}),
    ("bilinear 32->128 ac", (1, 256, 32, 32), {"size": (128, 128), "mode": "bilinear", "align_corners": True}),
    ("bilinear x2 cl", (1, 64, 64, 64), {"scale_factor": 2.0, "mode": "bilinear", "channels_last": True}),
    ("trilinear x2", (1, 16, 16, 32, 32), {"scale_factor": 2.0, "mode": "trilinear"}),
]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=30)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    for name, shape, kw0 in CASES:
        kw = dict(kw0)
        cl = kw.pop("channels_last", False)
        torch.manual_seed(0)
        x = torch.randn(*shape)
        if cl:
            x = x.contiguous(memory_format=torch.channels_last)

        def f(t: torch.Tensor, kw: dict = kw) -> torch.Tensor:
            return F.interpolate(t, **kw)

        # A code object of its own per case: compiled entries and the recompile limit are per
        # code object, and the cases would share one.
        code = f.__code__.replace(co_name=f"case{CASES.index((name, shape, kw0))}")
        jf = xjit.jit(types.FunctionType(code, f.__globals__, code.co_name, f.__defaults__))
        gy = torch.randn_like(f(x))
        leaf = x.clone().requires_grad_()

        def step(fn: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[], object]:
            def run() -> object:
                leaf.grad = None
                fn(leaf).backward(gy)
                return leaf.grad

            return run

        def infer(fn: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[], object]:
            def run() -> object:
                with torch.no_grad():
                    return fn(x)

            return run

        print(f"{name} {tuple(shape)} {kw}" + (" channels_last" if cl else ""))
        interleaved({"no_grad eager": infer(f), "no_grad xjit": infer(jf),
                     "fwd+bwd eager": step(f), "fwd+bwd xjit": step(jf)}, args.repeats)


if __name__ == "__main__":
    main()
