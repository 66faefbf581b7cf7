"""The matmul floor of a training step: how fast any f32 backend could run it on this machine.

Counts the step's floating-point work with torch.utils.flop_counter (matmuls, convolutions,
attention; elementwise work is not counted) in the forward and in the backward, measures this
machine's f32 GEMM rate at one thread on the step's own linear shapes (torch's sgemm) and on a
2048^3 product (the core's peak), and prints the floors (FLOPs / rate) beside eager's step
measured in the same process (one thread, CPU time). eager step / floor at the peak is the
largest speedup over eager an f32 compiler can show on that step here, whatever it fuses: the
floor counts only the products.

    python bench/flop_floor.py [--cases train-gpt/b8,train-mlp/b64] [--repeats 9]

The rate is torch's on the step's linear shapes, so a step whose products are mostly
convolutions (train-cnn) is skipped. Loss and optimizer run in eager for every backend in
bench/training.py; they are in eager's step and not in the floor.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.models import TRAINING_CASES, TrainingCase  # noqa: E402


def count_flops(case: TrainingCase) -> tuple[int, int, list[tuple[int, int, int]]]:
    """FLOPs of the forward and of the backward (loss included), and the linears' (m, k, n)."""
    model, (x, y) = case.build()
    shapes: list[tuple[int, int, int]] = []
    with FlopCounterMode(display=False) as fwd:
        out = model(x)
        loss = case.loss(out, y)
    with FlopCounterMode(display=False) as bwd:
        loss.backward()
    # Rows of every linear: tokens for a token batch, samples otherwise.
    rows = x.numel() if x.dtype == torch.long else x.shape[0]
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            shapes.append((rows, m.in_features, m.out_features))
    return fwd.get_total_flops(), bwd.get_total_flops(), shapes


def gemm_rate(shapes: list[tuple[int, int, int]], repeats: int) -> float:
    """FLOP/s of torch.mm at one thread over the given (m, k, n) shapes: total work over the
    summed median times."""
    flops = seconds = 0.0
    for m, k, n in sorted(set(shapes)):
        a, b = torch.randn(m, k), torch.randn(k, n)
        for _ in range(3):
            a @ b
        times = []
        for _ in range(repeats):
            start = time.process_time()
            a @ b
            times.append(time.process_time() - start)
        flops += 2.0 * m * k * n
        seconds += statistics.median(times)
    return flops / seconds


def eager_step_s(case: TrainingCase, repeats: int) -> float:
    model, (x, y) = case.build()
    opt = case.make_optimizer(model)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        case.loss(model(x), y).backward()
        opt.step()

    for _ in range(3):
        step()
    times = []
    for _ in range(repeats):
        start = time.process_time()
        step()
        times.append(time.process_time() - start)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(TRAINING_CASES))
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread, CPU time, medians of {args.repeats}")
    for name in args.cases.split(","):
        case = TRAINING_CASES[name]
        fwd, bwd, shapes = count_flops(case)
        linear = 3 * sum(2 * m * k * n for m, k, n in shapes)  # forward, input and weight grads
        if linear < 0.5 * (fwd + bwd):
            print(f"{name}: skipped, its products are mostly not linears ({linear / (fwd + bwd):.0%})")
            continue
        rate = gemm_rate(shapes, args.repeats)
        peak = max(rate, gemm_rate([(2048, 2048, 2048)], max(3, args.repeats // 3)))
        eager = eager_step_s(case, args.repeats)
        print(
            f"{name}: forward {fwd / 1e9:.2f} GFLOP, backward {bwd / 1e9:.2f} GFLOP; GEMM "
            f"{rate / 1e9:.0f} GFLOP/s on its shapes -> floor {(fwd + bwd) / rate * 1e3:.1f} ms "
            f"(forward {fwd / rate * 1e3:.1f}, backward {bwd / rate * 1e3:.1f}), "
            f"at most {eager * rate / (fwd + bwd):.2f}x eager; at the peak {peak / 1e9:.0f} "
            f"GFLOP/s (2048^3) {(fwd + bwd) / peak * 1e3:.1f} ms, at most "
            f"{eager * peak / (fwd + bwd):.2f}x eager; eager step {eager * 1e3:.1f} ms",
            flush=True,
        )


if __name__ == "__main__":
    main()
