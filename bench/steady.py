"""Steady-state run time only, fast: eager vs xjit (and optionally Inductor) in one process,
interleaved round-robin, medians; no cold/warm compile subprocesses (use bench/run.py for those).

    python bench/steady.py resnet18/b1,bert/b1 [--threads 1] [--repeats 11] [--backends eager,xjit]

With XJIT_PROFILE=1 set, xjit's time per instruction kind is printed at exit
(docs/runtime.md); XJIT_PIPELINE replaces the runtime's pass pipeline for A/B runs.
On a loaded machine use --threads 1 (and OMP_NUM_THREADS=1): multi-threaded timings then
measure the other processes as much as the model.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import interleave, leaves, medians_line, prepare  # noqa: E402
from bench.models import CASES  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", help="comma list of cases, e.g. resnet18/b1,bert/b1")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")
    ap.add_argument("--repeats", type=int, default=11)
    ap.add_argument("--backends", default="eager,xjit")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    backends = args.backends.split(",")
    for name in args.cases.split(","):
        model, inputs = CASES[name].build()
        with torch.no_grad():
            fns, outputs, errors = prepare(backends, model, inputs)
            samples = interleave(fns, args.repeats, 1, errors)
        line, _ = medians_line(name, samples)
        if "xjit" in outputs and "eager" in outputs:
            err = max(
                (a - b).abs().max().item()
                for a, b in zip(leaves(outputs["xjit"]), leaves(outputs["eager"]), strict=True)
            )
            line += f", max abs error {err:.1e}"
        for b, e in errors.items():
            line += f"\n  {b} failed: {e}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
