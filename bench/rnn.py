"""nn.LSTM / nn.GRU language-model cores, eager vs xjit on one thread (CPU time of the calling
thread, interleaved rounds): inference under no_grad and a training step (forward, a random
projection of the output as the loss, backward to every parameter), plus the first call's
capture and compile times.

    python bench/rnn.py [--cases lstm-l2-h256-t64-b1,gru-l2-h512-t64-b8] [--repeats 7]

A case is `{lstm|gru}-l{layers}-h{hidden}-t{steps}-b{batch}` (input size = hidden). Before
session 18 both modules ran as PyTorch fallback nodes (inference) or the whole step in Python
(training), so eager's figure is also what xjit gave then (docs/perf.md, session 18).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import xjit  # noqa: E402
from bench.common import interleave, leaves, thread_time_per_call  # noqa: E402

DEFAULT = "lstm-l2-h256-t64-b1,lstm-l2-h256-t64-b8,lstm-l2-h512-t64-b1,gru-l2-h256-t64-b1,gru-l2-h256-t64-b8"


def build(case: str) -> tuple[Any, torch.Tensor]:
    kind, layers, hidden, steps, batch = case.split("-")
    cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[kind]
    h = int(hidden[1:])
    torch.manual_seed(0)
    return cls(h, h, num_layers=int(layers[1:])), torch.randn(int(steps[1:]), int(batch[1:]), h)


def training_step(model: Any, x: torch.Tensor, proj: torch.Tensor) -> list[torch.Tensor]:
    out, _ = model(x)
    return list(torch.autograd.grad((out * proj).sum(), list(model.parameters())))


def spread(v: list[float]) -> str:
    return f"{statistics.median(v) * 1e3:.2f} ms [{min(v) * 1e3:.2f}-{max(v) * 1e3:.2f}]"


def first_call(fn: Any, *args: Any) -> str:
    start = time.perf_counter()
    report = xjit.explain(fn)(*args)
    wall = time.perf_counter() - start
    g = report.graphs[0]
    return (
        f"first call {wall * 1e3:.0f} ms wall (capture {report.capture_ms:.0f} ms, compile "
        f"{report.compile_ms:.0f} ms; {report.graph_count} graph, {sum(g.ops.values())} ops, "
        f"{'python' if g.runs_in_python else 'native'})"
    )


def compare(label: str, eager: Any, compiled: Any, args: argparse.Namespace, notes: str) -> None:
    """Interleaved CPU-time samples of eager() and compiled(), printed with their ratio."""
    errors: dict[str, str] = {}
    s = interleave({"eager": eager, "xjit": compiled}, args.repeats, args.inner, errors, thread_time_per_call)
    if errors:
        print(f"{label}: errors {errors}", flush=True)
        return
    ratio = statistics.median(s["eager"]) / statistics.median(s["xjit"])
    print(f"{label}: eager {spread(s['eager'])}, xjit {spread(s['xjit'])} ({ratio:.2f}x); {notes}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=DEFAULT)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--inner", type=int, default=3, help="calls per timing sample")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread, CPU time per call, median [min-max] of {args.repeats}")
    for case in args.cases.split(","):
        model, x = build(case)
        proj = torch.randn(x.shape[0], x.shape[1], model.hidden_size)
        eval_model = model.eval()
        compiled = xjit.jit(eval_model)
        with torch.no_grad():
            note = first_call(compiled, x)
            want, got = eval_model(x), compiled(x)
            err = max((g - w).abs().max().item() for g, w in zip(leaves(got), leaves(want)))
            compare(f"{case} inference", lambda: eval_model(x), lambda: compiled(x), args,
                    f"max abs err {err:.1e}; {note}")

        train_model = model.train()
        compiled_train = xjit.jit(train_model)
        note = first_call(compiled_train, x)
        want_g, got_g = training_step(train_model, x, proj), training_step(compiled_train, x, proj)
        gerr = max(((g - w).norm() / w.norm()).item() for g, w in zip(got_g, want_g))
        compare(f"{case} training step", lambda: training_step(train_model, x, proj),
                lambda: training_step(compiled_train, x, proj), args,
                f"max relative grad err vs eager {gerr:.1e}; {note}")


if __name__ == "__main__":
    main()
