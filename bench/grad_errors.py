"""Per-parameter gradient errors of a zoo model's training step against float64, eager's and
xjit's, over several seeds of the model's weights and inputs (the step, loss and float64
reference of bench/zoo_train.py). Per parameter class (layer numbers replaced by *): the
median and range over layers and seeds of eager's error, xjit's, and xjit's / eager's; then the
parameters over the zoo's bound (xjit's error > 4 x max(eager's, 2.5e-7)).

    python bench/grad_errors.py --model mixtral --seeds 0:6 --threads 1
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

from bench import zoo, zoo_train  # noqa: E402


def errors(name: str, seed: int) -> list[tuple[str, float, float]]:
    import xjit

    model, kwargs = zoo.build(name, seed=seed)
    model.train()
    if name in zoo_train.ADJUSTMENTS:
        zoo_train.ADJUSTMENTS[name][1](model)
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
    classes: dict[str, list[tuple[float, float, float]]] = {}
    over = []
    worst_vs_class = (0.0, "")
    for seed in range(lo, hi):
        rows = errors(a.model, seed)
        in_step: dict[str, list[float]] = {}
        for n, e_e, _ in rows:
            in_step.setdefault(_class(n), []).append(e_e)
        for n, e_e, e_x in rows:
            ratio = e_x / max(e_e, floor)
            classes.setdefault(_class(n), []).append((e_e, e_x, ratio))
            vs_class = e_x / max(e_e, statistics.median(in_step[_class(n)]), floor)
            worst_vs_class = max(worst_vs_class, (vs_class, f"seed {seed} {n}"))
            if a.show and a.show in n:
                print(f"seed {seed} {n}: eager {e_e:.2e} xjit {e_x:.2e} ratio {ratio:.2f}")
            if ratio > zoo_train.FACTOR:
                over.append(f"seed {seed} {n}: eager {e_e:.2e} xjit {e_x:.2e} ratio {ratio:.2f}")
    print(f"\n{a.model}, seeds {a.seeds}: median [min-max] over layers and seeds")
    print("| parameter class | eager's error | xjit's error | xjit / eager |")
    print("|---|---|---|---|")
    ratios = []
    for cls, rows in classes.items():
        cols = []
        for i in range(3):
            v = [r[i] for r in rows]
            fmt = "{:.2f}" if i == 2 else "{:.1e}"
            cols.append(f"{fmt.format(statistics.median(v))} [{fmt.format(min(v))}-{fmt.format(max(v))}]")
        ratios += [r[2] for r in rows]
        print(f"| {cls} | " + " | ".join(cols) + " |")
    print(f"median ratio over every parameter and seed: {statistics.median(ratios):.2f}")
    print("largest xjit / max(eager's, the median of eager's over the class's layers in that step): "
          f"{worst_vs_class[0]:.2f} ({worst_vs_class[1]})")
    print("over the zoo's bound:" if over else "over the zoo's bound: none")
    for line in over:
        print("  " + line)


if __name__ == "__main__":
    main()
