"""cumsum on [1024,1000] f32 along each dim: eager, xjit's native kernel, the reference kernel,
and the reverse scan (the gradient: xjit's `cumsum{reverse = true}` against eager's flip,
cumsum, flip); then a training step through cumsum, eager vs xjit. Side by side in one process,
1 thread, median [10th-90th percentile] of interleaved repeats of the calling thread's CPU time.

    XJIT_NUM_THREADS=1 OMP_NUM_THREADS=1 python bench/cumsum.py [--repeats 21]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

os.environ.setdefault("XJIT_NUM_THREADS", "1")

import torch

import xjit
import xjit._xjit as x_


def cpu_ms(fn: Callable[[], object]) -> float:
    start = time.process_time()
    fn()
    return (time.process_time() - start) * 1e3


def interleaved(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, str]:
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            times[name].append(cpu_ms(fn))
    out = {}
    for name, ts in times.items():
        ts.sort()
        k = len(ts) // 10
        out[name] = f"{ts[len(ts) // 2]:.3f} [{ts[k]:.3f}-{ts[-1 - k]:.3f}] ms"
    return out


def step_fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (torch.cumsum(x * w, 1) ** 2).mean()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=21)
    args = ap.parse_args()
    torch.set_num_threads(1)
    x = torch.randn(1024, 1000)
    for dim in (1, 0):
        fwd = xjit.jit(lambda t, d=dim: torch.cumsum(t, d))
        g = x_.Graph("g")
        xin = g.add_input("f32[1024,1000]", "x")
        g.set_outputs(g.add_op("cumsum", [xin], {"dim": dim, "reverse": True}))
        rev = x_.compile(g)
        with torch.no_grad():
            assert torch.equal(fwd(x), torch.cumsum(x, dim))
            rev.run([x], "torch")
            r = interleaved(
                {
                    "eager": lambda d=dim: torch.cumsum(x, d),
                    "xjit": lambda: fwd(x),
                    "eager flip-cumsum-flip": lambda d=dim: torch.cumsum(x.flip(d), d).flip(d),
                    "xjit reverse": lambda: rev.run([x], "torch"),
                },
                args.repeats,
            )
            r.update(interleaved(
                {"reference": lambda d=dim: x_.run_op("cumsum", [x], {"dim": d}, "torch")}, 3))
        print(f"dim {dim}: " + ", ".join(f"{k} {v}" for k, v in r.items()))
    compiled = xjit.jit(step_fn)
    xs = torch.randn(1024, 1000, requires_grad=True)
    w = torch.randn(1000, requires_grad=True)

    def step(fn: Callable[..., torch.Tensor]) -> Callable[[], None]:
        def go() -> None:
            xs.grad = w.grad = None
            fn(xs, w).backward()

        return go

    step(compiled)()
    print("train step: " + ", ".join(
        f"{k} {v}" for k, v in interleaved({"eager": step(step_fn), "xjit": step(compiled)},
                                           args.repeats).items()))


if __name__ == "__main__":
    main()
