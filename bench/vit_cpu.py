"""ViT-small b1 on one thread, measured in CPU time: eager vs xjit for the whole model, and the
parts of its attention (softmax of the [1,6,197,197] scores and the matmul by v) against PyTorch.

    PYTHONPATH=build/python OMP_NUM_THREADS=1 python bench/vit_cpu.py [--repeats 11]

CPU time of the calling thread (one thread, so it is the whole work) is what a loaded machine
still measures fairly: wall time there counts the other processes' slices, and with two threads
an OpenMP barrier waits whole slices for a descheduled worker. It cannot show what a second
thread gains; run bench/steady.py on an idle machine for that. Rounds alternate eager and xjit;
figures are medians.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import xjit  # noqa: E402
import xjit.ir as ir  # noqa: E402
from bench.common import interleaved_medians, leaves, thread_time_per_call  # noqa: E402
from bench.models import CASES  # noqa: E402

ATTENTION_TAIL = """graph @tail(%s: f32[1,6,197,197], %v: f32[1,6,197,64]) -> (f32[1,6,197,64]) {
  %p = softmax(%s) {dim = -1} : f32[1,6,197,197]
  %y = matmul(%p, %v) : f32[1,6,197,64]
  return(%y)
}"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=11)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, 1 thread, CPU time of the calling thread, medians")

    model, inputs = CASES["vit/b1"].build()
    compiled = xjit.jit(model)
    with torch.no_grad():
        want, got = model(*inputs), compiled(*inputs)
        got = compiled(*inputs)
        err = max((a - b).abs().max().item() for a, b in zip(leaves(got), leaves(want)))
        med = interleaved_medians(
            {"xjit": lambda: compiled(*inputs), "eager": lambda: model(*inputs)},
            args.repeats,
            1,
            thread_time_per_call,
        )
        x_ms, e_ms = med["xjit"] * 1e3, med["eager"] * 1e3
    print(
        f"vit/b1: eager {e_ms:.1f} ms, xjit {x_ms:.1f} ms ({e_ms / x_ms:.2f}x eager), "
        f"max abs error {err:.1e}"
    )

    tail = ir.compile(ir.parse(ATTENTION_TAIL))
    s, v = torch.randn(1, 6, 197, 197) * 4, torch.randn(1, 6, 197, 64)
    err = (tail(s, v)[0] - torch.softmax(s, -1) @ v).abs().max().item()
    med = interleaved_medians(
        {"xjit": lambda: tail(s, v), "torch": lambda: torch.softmax(s, -1) @ v},
        args.repeats,
        20,
        thread_time_per_call,
    )
    x_ms, t_ms = med["xjit"] * 1e3, med["torch"] * 1e3
    print(
        f"attention softmax [1,6,197,197] + matmul by v: torch {t_ms * 1e3:.0f} us, "
        f"xjit {x_ms * 1e3:.0f} us, max abs error {err:.1e}"
    )


if __name__ == "__main__":
    main()
