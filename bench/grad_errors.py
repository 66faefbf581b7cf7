"""Per-parameter gradient errors of a zoo model's training step against float64, eager's and
xjit's, over several seeds of the model's weights and inputs (the step, loss and float64
reference of bench/zoo_train.py). Per parameter class (layer numbers replaced by *): the
median and range over layers and seeds of eager's error, xjit's, and xjit's / eager's; then the
parameters over the zoo's bound (xjit's error > 4 x max(eager's, 2.5e-7)).

    python bench/grad_errors.py --model mixtral --seeds 0:10 --show mlp.gate
    XJIT_REFERENCE_PRODUCTS=1 python bench/grad_errors.py ...   # products accumulated in f64

A single gradient's error is a noisy measure: one seed's ratio can be far from the class's
median (docs/perf.md "Session 20: Mixtral's router gradient").
"""

from __future__ import annotations

import argparse
import copy
import os
import re
import statistics
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# Every seed is a new model: a recompile of the same forward frame, which the default limit (8)
# would send to Python after a few seeds.
os.environ.setdefault("XJIT_RECOMPILE_LIMIT", "1000")

import torch  # noqa: E402

from bench import zoo_train  # noqa: E402


def errors(name: str, seed: int) -> list[tuple[str, float, float]]:
    import xjit

    model, kwargs = zoo_train.train_model(name, seed=seed)
    mx = copy.deepcopy(model)
    reports = []

    def explained(**kw: object) -> object:
        reports.append(xjit.explain(compiled)(**kw))
        return reports[-1].output

    compiled = xjit.jit(mx)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        st = zoo_train.steps(model, mx, explained, kwargs, name)
    in_python = [g.note for g in reports[0].graphs if g.runs_in_python]
    if caught or in_python:  # then these are not (only) compiled gradients
        print(f"seed {seed}: {[str(w.message)[:200] for w in caught]} {in_python}")
    return zoo_train.gradient_errors(zoo_train.gradients(model, mx, st["m64"]))


def _class(name: str) -> str:
    return re.sub(r"\.\d+\.", ".*.", name)


def _range(values: list[float], fmt: str) -> str:
    return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}-{fmt.format(max(values))}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="mixtral", help="a bench/zoo.py model")
    ap.add_argument("--seeds", default="0:6", help="A:B, seeds A to B-1 (seed 0 is the zoo's model)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--show", default="", help="also print each parameter whose name contains this")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    lo, hi = (int(x) for x in a.seeds.split(":"))
    floor = zoo_train.FLOOR / zoo_train.FACTOR
    classes: dict[str, list[tuple[float, float, float]]] = {}  # (eager's, xjit's, ratio)
    over = []
    # Two candidate rules (docs/perf.md "Session 20"): each gradient against 4 x max(eager's,
    # the median of eager's over the class's layers); the class's median errors against each other.
    worst_vs_class = worst_medians = (0.0, "")
    for seed in range(lo, hi):
        step: dict[str, tuple[list[float], list[float]]] = {}
        rows = errors(a.model, seed)
        for n, e_e, e_x in rows:
            step.setdefault(_class(n), ([], []))
            step[_class(n)][0].append(e_e)
            step[_class(n)][1].append(e_x)
        for cls, (eager, xjit) in step.items():
            medians = statistics.median(xjit) / max(statistics.median(eager), floor)
            worst_medians = max(worst_medians, (medians, f"seed {seed} {cls}"))
        for n, e_e, e_x in rows:
            ratio = e_x / max(e_e, floor)
            classes.setdefault(_class(n), []).append((e_e, e_x, ratio))
            vs_class = e_x / max(e_e, statistics.median(step[_class(n)][0]), floor)
            worst_vs_class = max(worst_vs_class, (vs_class, f"seed {seed} {n}"))
            line = f"seed {seed} {n}: eager {e_e:.2e} xjit {e_x:.2e} ratio {ratio:.2f}"
            if a.show and a.show in n:
                print(line)
            if ratio > zoo_train.FACTOR:
                over.append(line)
    print(f"\n{a.model}, seeds {a.seeds}: median [min-max] over layers and seeds")
    print("| parameter class | eager's error | xjit's error | xjit / eager |")
    print("|---|---|---|---|")
    for cls, got in classes.items():
        cols = [_range([r[0] for r in got], "{:.1e}"), _range([r[1] for r in got], "{:.1e}"),
                _range([r[2] for r in got], "{:.2f}")]
        print(f"| {cls} | " + " | ".join(cols) + " |")
    ratios = [r[2] for got in classes.values() for r in got]
    print(f"median ratio over every parameter and seed: {statistics.median(ratios):.2f}")
    print("largest xjit / max(eager's, the median of eager's over the class's layers in that step): "
          f"{worst_vs_class[0]:.2f} ({worst_vs_class[1]})")
    print("largest median of xjit's errors over a class's layers / median of eager's, in one step: "
          f"{worst_medians[0]:.2f} ({worst_medians[1]})")
    print("over the zoo's bound:" if over else "over the zoo's bound: none")
    for line in over:
        print("  " + line)


if __name__ == "__main__":
    main()
