"""oneDNN library kernels vs PyTorch, side by side in one process (a benchmark, not a test).

For each case it compiles a one-op (or op + epilogue) graph with ``xjit.ir.compile`` (the CPU
target: oneDNN for matmul / linear / conv / pooling) and times it against the same PyTorch call
(torch.matmul, F.linear, F.conv1d/2d, F.max_pool2d), interleaved: each round runs a batch of
xjit calls then a batch of torch calls (the order alternating between rounds), and the figures
are medians over rounds. ``ratio`` is xjit time / torch time (< 1: xjit faster). Weights are
graph inputs here, as they are arguments of the PyTorch call (no prepacking on either side;
xjit's prepacked constant weights are timed by xjit-bench-library-kernels).

    PYTHONPATH=build/python python bench/backend/library_kernels.py [--rounds R] [--only NAME]

Both libraries run on one OpenMP thread pool: PyTorch's bundled libgomp has the soname
libgomp.so.1, so Debian's oneDNN binds to it once torch is imported (checked in
/proc/self/maps). Its worker threads spin-wait between parallel regions, which on a small
shared machine costs whole scheduler slices; run it on an idle machine for final figures.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import xjit.ir as ir  # noqa: E402
from bench.common import interleaved_medians, time_per_call  # noqa: E402


def dt_name(dtype: torch.dtype) -> str:
    return {torch.float32: "f32", torch.bfloat16: "bf16"}[dtype]


def ty(t: torch.Tensor) -> str:
    return f"{dt_name(t.dtype)}[{','.join(str(s) for s in t.shape)}]"


class Case:
    def __init__(
        self,
        name: str,
        body: str,
        args: list[torch.Tensor],
        result_shape: tuple[int, ...],
        torch_fn: Callable[..., Any],
        flops: float,
    ) -> None:
        params = ", ".join(f"%a{i}: {ty(a)}" for i, a in enumerate(args))
        out = f"{dt_name(args[0].dtype)}[{','.join(str(s) for s in result_shape)}]"
        text = f"graph @bench({params}) -> ({out}) {{\n{body.replace('OUT', out)}\n}}"
        self.name = name
        self.graph = ir.compile(ir.parse(text))
        self.args = args
        self.torch_fn = torch_fn
        self.flops = flops

    def check(self) -> float:
        got = self.graph(*self.args)[0]
        ref = self.torch_fn(*self.args)
        return float((got.float() - ref.float()).abs().max() / ref.float().abs().max())


def cases(dtype: torch.dtype) -> list[Case]:
    r = lambda *s: torch.randn(*s, dtype=dtype)  # noqa: E731
    out: list[Case] = []
    for n in (256, 1024):
        out.append(
            Case(
                f"matmul {n}x{n}x{n}",
                "  %y = matmul(%a0, %a1) : OUT\n  return(%y)",
                [r(n, n), r(n, n)],
                (n, n),
                torch.matmul,
                2.0 * n**3,
            )
        )
    out.append(
        Case(
            "matmul batched 12x128x64 @ 12x64x128",
            "  %y = matmul(%a0, %a1) : OUT\n  return(%y)",
            [r(12, 128, 64), r(12, 64, 128)],
            (12, 128, 128),
            torch.matmul,
            2.0 * 12 * 128 * 64 * 128,
        )
    )
    out.append(
        Case(
            "linear 128x768 -> 3072 + bias + gelu",
            "  %l = linear(%a0, %a1, %a2) : OUT\n  %y = gelu(%l) : OUT\n  return(%y)",
            [r(128, 768), r(3072, 768), r(3072)],
            (128, 3072),
            lambda x, w, b: F.gelu(F.linear(x, w, b)),
            2.0 * 128 * 768 * 3072,
        )
    )
    out.append(
        Case(
            "conv2d 1x64x56x56 k3 64 pad 1",
            "  %y = conv2d(%a0, %a1, %a2) {padding = [1]} : OUT\n  return(%y)",
            [r(1, 64, 56, 56), r(64, 64, 3, 3), r(64)],
            (1, 64, 56, 56),
            lambda x, w, b: F.conv2d(x, w, b, padding=1),
            2.0 * 64 * 64 * 56 * 56 * 9,
        )
    )
    out.append(
        Case(
            "conv2d 8x64x56x56 k3 64 pad 1 + relu",
            "  %c = conv2d(%a0, %a1, %a2) {padding = [1]} : OUT\n  %y = relu(%c) : OUT\n"
            "  return(%y)",
            [r(8, 64, 56, 56), r(64, 64, 3, 3), r(64)],
            (8, 64, 56, 56),
            lambda x, w, b: F.relu(F.conv2d(x, w, b, padding=1)),
            2.0 * 8 * 64 * 64 * 56 * 56 * 9,
        )
    )
    out.append(
        Case(
            "conv2d 1x256x14x14 k3 256 pad 1",
            "  %y = conv2d(%a0, %a1) {padding = [1]} : OUT\n  return(%y)",
            [r(1, 256, 14, 14), r(256, 256, 3, 3)],
            (1, 256, 14, 14),
            lambda x, w: F.conv2d(x, w, padding=1),
            2.0 * 256 * 256 * 14 * 14 * 9,
        )
    )
    out.append(
        Case(
            "conv2d 1x3x224x224 k7 s2 64",
            "  %y = conv2d(%a0, %a1) {stride = [2], padding = [3]} : OUT\n  return(%y)",
            [r(1, 3, 224, 224), r(64, 3, 7, 7)],
            (1, 64, 112, 112),
            lambda x, w: F.conv2d(x, w, stride=2, padding=3),
            2.0 * 64 * 3 * 112 * 112 * 49,
        )
    )
    out.append(
        Case(
            "conv1d 8x64x512 k3 128 pad 1",
            "  %y = conv1d(%a0, %a1, %a2) {padding = [1]} : OUT\n  return(%y)",
            [r(8, 64, 512), r(128, 64, 3), r(128)],
            (8, 128, 512),
            lambda x, w, b: F.conv1d(x, w, b, padding=1),
            2.0 * 8 * 128 * 512 * 64 * 3,
        )
    )
    out.append(
        Case(
            "max_pool2d 8x64x112x112 k3 s2 p1",
            "  %y = max_pool2d(%a0) {kernel_size = [3], stride = [2], padding = [1]} : OUT\n"
            "  return(%y)",
            [r(8, 64, 112, 112)],
            (8, 64, 56, 56),
            lambda x: F.max_pool2d(x, 3, 2, 1),
            0.0,
        )
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--only", default="")
    ap.add_argument("--bf16", action="store_true", help="bf16 operands (f32 accumulation)")
    a = ap.parse_args()
    torch.manual_seed(0)
    dtype = torch.bfloat16 if a.bf16 else torch.float32
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {dt_name(dtype)}")
    print(
        f"{'case':42s} {'xjit us':>10s} {'torch us':>10s} {'ratio':>7s} {'GFLOP/s':>8s} {'err':>8s}"
    )
    for c in cases(dtype):
        if a.only and a.only not in c.name:
            continue
        stats = c.graph.stats
        if stats["reference_ops"]:
            print(f"{c.name:42s} not on the library path: {stats['not_compiled']}")
            continue
        err = c.check()
        x_fn = lambda: c.graph(*c.args)  # noqa: E731
        t_fn = lambda: c.torch_fn(*c.args)  # noqa: E731
        one = time_per_call(t_fn, 3)
        calls = max(1, int(0.05 / max(one, 1e-7)))
        med = interleaved_medians({"xjit": x_fn, "torch": t_fn}, a.rounds, calls)
        xm, tm = med["xjit"], med["torch"]
        gflops = f"{c.flops / xm * 1e-9:8.1f}" if c.flops else f"{'':8s}"
        print(f"{c.name:42s} {xm * 1e6:10.1f} {tm * 1e6:10.1f} {xm / tm:7.2f} {gflops} {err:8.1e}")


if __name__ == "__main__":
    main()
