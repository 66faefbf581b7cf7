"""The max-pool gradient (ResNet's stem MaxPool2d(3, 2, 1)): xjit's `max_pool2d_backward` kernel
alone on channels-last and channels-first x against eager's `max_pool2d_with_indices_backward`
(given the forward's indices), then the stem (conv 7x7/2 + batch norm + ReLU + the pool)
forward + backward under xjit.jit against eager. Per call, interleaved repeats in one process:
median [10th-90th percentile] of wall time and of the process's CPU time (all threads).

    python bench/max_pool_backward.py [--threads 1] [--batch 1,8] [--repeats 30]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import torch

import xjit
import xjit._xjit as x_

F = torch.nn.functional
KW = {"kernel_size": 3, "stride": 2, "padding": 1}


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    w, c = time.perf_counter(), time.process_time()
    fn()
    return (time.perf_counter() - w) * 1e3, (time.process_time() - c) * 1e3


def interleaved(fns: dict[str, Callable[[], object]], repeats: int) -> None:
    for fn in fns.values():  # warm up: compile, first-touch the buffers
        fn()
        fn()
    samples: dict[str, list[tuple[float, float]]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            samples[name].append(timed(fn))

    def stat(ts: list[float]) -> str:
        ts = sorted(ts)
        k = len(ts) // 10
        return f"{ts[len(ts) // 2]:7.3f} [{ts[k]:.3f}-{ts[-1 - k]:.3f}]"

    for name, s in samples.items():
        print(f"  {name:34s} wall {stat([w for w, _ in s])}  cpu {stat([c for _, c in s])} ms")


def kernel_cases(batch: int, repeats: int) -> None:
    torch.manual_seed(0)
    shape = (batch, 64, 112, 112)
    graph = x_.Graph("g")
    gin = graph.add_input(f"f32[{batch},64,56,56]", "g")
    xin = graph.add_input(f"f32[{','.join(map(str, shape))}]", "x")
    attrs = {k: [v] for k, v in KW.items()}
    graph.set_outputs(graph.add_op("max_pool2d_backward", [gin, xin], attrs))
    compiled = x_.compile(graph)
    fns: dict[str, Callable[[], object]] = {}
    for layout in ("channels_last", "channels_first"):
        x = torch.randn(shape)
        if layout == "channels_last":
            x = x.to(memory_format=torch.channels_last)
        y, idx = F.max_pool2d_with_indices(x, **KW)
        g = torch.randn(y.shape).to(memory_format=torch.channels_last if layout ==
                                    "channels_last" else torch.contiguous_format)
        want = torch.ops.aten.max_pool2d_with_indices_backward(g, x, 3, 2, 1, 1, False, idx)
        got = compiled.run([g, x], framework="torch")[0]
        assert torch.equal(got, want), layout
        fns[f"xjit kernel {layout}"] = lambda g=g, x=x: compiled.run([g, x], framework="torch")
        fns[f"eager backward {layout}"] = (
            lambda g=g, x=x, idx=idx: torch.ops.aten.max_pool2d_with_indices_backward(
                g, x, 3, 2, 1, 1, False, idx))
    print(f"kernel [{batch},64,112,112] 3x3/2 pad 1:")
    interleaved(fns, repeats)


def stem_case(batch: int, repeats: int) -> None:
    torch.manual_seed(0)

    def stem() -> torch.nn.Module:
        return torch.nn.Sequential(torch.nn.Conv2d(3, 64, 7, 2, 3, bias=False),
                                   torch.nn.BatchNorm2d(64), torch.nn.ReLU(),
                                   torch.nn.MaxPool2d(3, 2, 1))

    ref = stem()
    mine = stem()
    mine.load_state_dict(ref.state_dict())
    compiled = xjit.jit(mine)
    x = torch.randn(batch, 3, 224, 224)

    def step(m: Callable[[torch.Tensor], torch.Tensor]) -> None:
        m(x).sum().backward()

    print(f"stem fwd+bwd, batch {batch}:")
    interleaved({"eager": lambda: step(ref), "xjit": lambda: step(compiled)}, repeats)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", default="1,8", help="stem batch sizes")
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--skip-kernel", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{args.threads} thread(s), load average {os.getloadavg()[0]:.2f}")
    if not args.skip_kernel:
        kernel_cases(1, args.repeats)
    for b in map(int, args.batch.split(",")):
        stem_case(b, max(5, args.repeats // b))


if __name__ == "__main__":
    main()
