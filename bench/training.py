"""Training steps: forward + backward + optimizer step of bench/models.py's TRAINING_CASES
(an MLP with SGD, a small GPT with AdamW), eager vs torch.compile (Inductor) vs xjit.

Each backend trains its own copy of the same model (same weights, same batch); the steps are
interleaved in one process, round-robin; the figure is the median step time after warm-up.
Each compiling backend compiles the model and, as PyTorch's compiled-optimizer recipe does, a
function calling `opt.step()` (Inductor: torch.compile, xjit: xjit.jit); `--eager-optimizer`
runs the optimizer step in eager PyTorch for every backend instead (the figures before
session 15).
Also: the first two steps' time (capture + compile of forward and backward at the first, of the
optimizer step at the first (Inductor) or second (xjit: its first call makes the optimizer's
state in Python)), and the largest
relative difference of the losses against eager's over the steps taken.

    python bench/training.py [--cases train-mlp/b64,train-gpt/b8] [--backends eager,inductor,xjit]
                             [--repeats 15] [--threads N] [--timer wall|cpu] [--eager-optimizer]
                             [--out bench/results/training.json]

--timer cpu times each step in CPU seconds of the process (all threads): on a loaded machine it
is steadier than wall time; with --threads 1 it is the step's own work.

--memory runs each case and backend alone in a fresh process instead (glibc as users run it):
the model is built, three steps warm it up (xjit compiles the optimizer step at the second, and
the release of the compiler's memory after its first run ends there), the resident set's
high-water mark is reset, then --repeats steps run; reports the peak RSS of those steps (steady)
and of the whole process (compiles included) against eager's.

--phases also times the step's phases apart (zero_grad, forward, loss, backward, optimizer step;
medians over as many interleaved steps as --repeats, with the same timer): where a backend's step
differs from eager's. Those steps are extra, after the timed ones (the losses compared above are
not affected).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (  # noqa: E402
    describe_machine,
    interleave,
    make_backend,
    reset_peak_rss,
    rss_mb,
    setup_threads,
)
from bench.models import TRAINING_CASES, TrainingCase  # noqa: E402


class Trainer:
    """One backend's model copy, optimizer and step; the losses it saw."""

    def __init__(
        self, case: TrainingCase, backend: str, model: torch.nn.Module, batch: Any, compile_optimizer: bool
    ) -> None:
        self.model = copy.deepcopy(model)
        self.forward = make_backend(backend, self.model)
        self.opt = case.make_optimizer(self.model)
        opt = self.opt

        def optimizer_step() -> None:
            opt.step()

        # PyTorch's recipe for a compiled optimizer step ("Compiling the optimizer with
        # torch.compile"): the step in a function the backend compiles.
        self.optimizer_step = make_backend(backend, optimizer_step) if compile_optimizer else opt.step
        self.case, self.batch = case, batch
        self.losses: list[float] = []

    def step(self) -> None:
        x, y = self.batch
        torch.manual_seed(1000 + len(self.losses))  # each backend's n-th step draws alike (dropout)
        self.opt.zero_grad(set_to_none=True)
        loss = self.case.loss(self.forward(x), y)
        loss.backward()
        self.optimizer_step()
        self.losses.append(loss.item())

    def phased_step(self, clock: Any) -> list[float]:
        """step(), each phase timed with `clock`: seconds of zero_grad, forward, loss, backward,
        optimizer step."""
        x, y = self.batch
        torch.manual_seed(1000 + len(self.losses))
        t = [clock()]
        self.opt.zero_grad(set_to_none=True)
        t.append(clock())
        out = self.forward(x)
        t.append(clock())
        loss = self.case.loss(out, y)
        t.append(clock())
        loss.backward()
        t.append(clock())
        self.optimizer_step()
        t.append(clock())
        self.losses.append(loss.item())
        return [b - a for a, b in zip(t, t[1:])]


PHASES = ("zero_grad", "forward", "loss", "backward", "optimizer")


def phase_medians(trainers: dict[str, Trainer], repeats: int, cpu: bool) -> dict[str, dict[str, float]]:
    """Median seconds per phase of each backend's step, the backends interleaved round-robin."""
    clock = time.process_time if cpu else time.perf_counter
    samples: dict[str, list[list[float]]] = {b: [] for b in trainers}
    for _ in range(repeats):
        for b, t in trainers.items():
            samples[b].append(t.phased_step(clock))
    return {
        b: {name: statistics.median(col) for name, col in zip(PHASES, zip(*rows))}
        for b, rows in samples.items()
    }


def cpu_time_per_call(fn: Any, inner: int) -> float:
    start = time.process_time()
    for _ in range(inner):
        fn()
    return (time.process_time() - start) / inner


def run_case(
    case: TrainingCase,
    backends: list[str],
    repeats: int,
    inner: int,
    cpu: bool = False,
    phases: bool = False,
    compile_optimizer: bool = True,
) -> dict[str, Any]:
    model, batch = case.build()
    trainers: dict[str, Trainer] = {}
    result: dict[str, Any] = {"case": case.name, "backends": {b: {} for b in backends}}
    errors: dict[str, str] = {}
    for b in backends:
        try:
            t = Trainer(case, b, model, batch, compile_optimizer)
            start = time.perf_counter()
            t.step()
            result["backends"][b]["first_step_s"] = time.perf_counter() - start
            # xjit compiles the optimizer step at its second call (the first makes the state)
            start = time.perf_counter()
            t.step()
            result["backends"][b]["second_step_s"] = time.perf_counter() - start
            t.step()  # warm-up
            trainers[b] = t
        except Exception as exc:  # recorded, the other backends go on
            errors[b] = f"{type(exc).__name__}: {exc}"
    fns = {b: t.step for b, t in trainers.items()}
    if cpu:
        samples = interleave(fns, repeats, inner, errors, cpu_time_per_call)
    else:
        samples = interleave(fns, repeats, inner, errors)
    eager = trainers.get("eager")
    for b, s in samples.items():
        row = result["backends"][b]
        row["median_s"] = statistics.median(s)
        row["samples_s"] = s
        if eager is not None and b != "eager":
            # The same steps in the same order: losses agree up to float rounding.
            n = min(len(eager.losses), len(trainers[b].losses))
            diffs = [abs(x - y) / max(abs(y), 1e-12) for x, y in zip(trainers[b].losses[:n], eager.losses[:n])]
            row["max_loss_rel_diff"] = max(diffs)
            row["speedup_vs_eager"] = statistics.median(samples["eager"]) / row["median_s"]
    if "inductor" in samples and "xjit" in samples:
        result["backends"]["xjit"]["ratio_vs_inductor"] = (
            statistics.median(samples["inductor"]) / result["backends"]["xjit"]["median_s"]
        )
    if phases:
        for b, medians in phase_medians(trainers, repeats, cpu).items():
            if b in samples:
                result["backends"][b]["phases_s"] = medians
    for b, text in errors.items():
        result["backends"][b]["error"] = text
    return result


def memory_child(name: str, backend: str, steps: int, compile_optimizer: bool) -> dict[str, Any]:
    """One backend's steps alone in this process: peak RSS of `steps` steps after three warm-up
    steps, and of the whole process."""
    case = TRAINING_CASES[name]
    model, batch = case.build()
    built = rss_mb()
    trainer = Trainer(case, backend, model, batch, compile_optimizer)
    del model
    for _ in range(3):
        trainer.step()
    run_peak = rss_mb("VmHWM")
    if not reset_peak_rss():
        raise RuntimeError("cannot reset the peak RSS (/proc/self/clear_refs)")
    for _ in range(steps):
        trainer.step()
    peak = rss_mb("VmHWM")
    return {"built_mb": built, "peak_mb": peak, "run_peak_mb": max(run_peak, peak), "losses": trainer.losses}


def memory_cases(args: argparse.Namespace, backends: list[str]) -> list[dict[str, Any]]:
    """Each case and backend in a fresh process (memory_child): peak RSS of the steps."""
    results = []
    for name in args.cases.split(","):
        r: dict[str, Any] = {"case": name, "backends": {}}
        for b in backends:
            cmd = [sys.executable, __file__, "--memory-child", name, b, "--repeats", str(args.repeats)]
            if args.threads:
                cmd += ["--threads", str(args.threads)]
            if args.eager_optimizer:
                cmd.append("--eager-optimizer")
            out = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ), check=False)
            if out.returncode != 0:
                r["backends"][b] = {"error": out.stderr.strip()[-300:]}
                continue
            r["backends"][b] = json.loads(out.stdout.strip().splitlines()[-1])
        eager = r["backends"].get("eager", {})
        cells = []
        for b, row in r["backends"].items():
            if "error" in row:
                cells.append(f"{b} ERROR {row['error']}")
                continue
            text = f"{b} peak {row['peak_mb']:.0f} MB (whole run {row['run_peak_mb']:.0f})"
            if b != "eager" and "peak_mb" in eager:
                text += f" ({row['peak_mb'] / eager['peak_mb']:.3f}x eager, whole run "
                text += f"{row['run_peak_mb'] / eager['run_peak_mb']:.3f}x"
                diff = max(abs(x - y) / abs(y) for x, y in zip(row["losses"], eager["losses"]))
                text += f", loss diff {diff:.1e})"
            cells.append(text)
        built = eager.get("built_mb")
        print(f"{name:<16} model built {built or 0:.0f} MB  " + "  ".join(cells), flush=True)
        results.append(r)
    return results


def line(r: dict[str, Any]) -> str:
    parts = [f"{r['case']:<16}"]
    for b, row in r["backends"].items():
        if "error" in row:
            parts.append(f"{b} ERROR {row['error'][:200]}")
            continue
        text = (
            f"{b} {row['median_s'] * 1e3:.1f} ms (first steps {row['first_step_s']:.2f} + "
            f"{row.get('second_step_s', 0.0):.2f} s"
        )
        if "speedup_vs_eager" in row:
            text += f", {row['speedup_vs_eager']:.2f}x eager, loss diff {row['max_loss_rel_diff']:.1e}"
        if "ratio_vs_inductor" in row:
            text += f", {row['ratio_vs_inductor']:.2f}x inductor"
        parts.append(text + ")")
    for b, row in r["backends"].items():
        if "phases_s" in row:
            cells = "  ".join(f"{name} {row['phases_s'][name] * 1e3:.1f}" for name in PHASES)
            parts.append(f"\n  {b:<9} phases (ms): {cells}")
    return "  ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=",".join(TRAINING_CASES))
    parser.add_argument("--backends", default="eager,inductor,xjit")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--inner", type=int, default=1, help="steps per timing sample")
    parser.add_argument("--threads", type=int, help="torch threads (default: all cores)")
    parser.add_argument("--timer", choices=("wall", "cpu"), default="wall")
    parser.add_argument("--phases", action="store_true", help="also time the step's phases apart")
    parser.add_argument(
        "--eager-optimizer",
        action="store_true",
        help="run the optimizer step in eager PyTorch for every backend (default: each backend "
        "compiles it, as PyTorch's compiled-optimizer recipe does)",
    )
    parser.add_argument("--memory", action="store_true", help="peak RSS of each backend's steps, each alone in a fresh process")
    parser.add_argument("--memory-child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    setup_threads()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.memory_child:
        name, backend = args.memory_child
        print(json.dumps(memory_child(name, backend, args.repeats, not args.eager_optimizer)))
        return
    backends = args.backends.split(",")
    if "eager" not in backends:
        backends.insert(0, "eager")
    machine = describe_machine()
    print(
        f"{machine['cpu']}, {machine['cores']} cores, torch {machine['torch']}, "
        f"{torch.get_num_threads()} threads, {args.timer} time",
        flush=True,
    )
    if args.memory:
        results = memory_cases(args, backends)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps({"machine": machine, "memory": results}, indent=1))
        return
    results = []
    for name in args.cases.split(","):
        r = run_case(
            TRAINING_CASES[name],
            backends,
            args.repeats,
            args.inner,
            args.timer == "cpu",
            args.phases,
            not args.eager_optimizer,
        )
        r["threads"], r["timer"] = torch.get_num_threads(), args.timer
        r["optimizer"] = "eager" if args.eager_optimizer else "compiled"
        print(line(r), flush=True)
        results.append(r)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"machine": machine, "cases": results}, indent=1))


if __name__ == "__main__":
    main()
