"""Benchmark harness: eager PyTorch vs torch.compile (Inductor, default mode) vs xjit.

    python bench/run.py [--quick] [--models mlp,bert,...|mlp/b64,...] [--backends eager,xjit] [--out DIR]

Per case, each in a fresh subprocess (run by bench/worker.py):
  1. first-call, cold: every backend alone, caches in an empty directory: first-call (compile)
     time, peak RSS, graph and graph-break counts;
  2. first-call, warm (compilers only): a second fresh process reusing the filled cache; each
     first-call process also times 3 later calls, so the first call's overhead over a later call
     of the same backend (first - later) is reported next to the raw first-call time;
  3. steady: all backends in one process on the same inputs, interleaved round-robin: median
     time per call, max error against eager.
Then the training steps (bench/training.py: forward + backward + optimizer step, interleaved in
one process, first step with an empty cache) and the micro-benchmarks (bench/micro.py). Writes
results.json, results.md and PNG charts to
DIR (default bench/results). A failing case or backend is recorded and the run continues.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import report
from bench.common import BACKENDS, COMPILERS, error_text
from bench.models import CASES, TRAINING_CASES

BENCH = Path(__file__).resolve().parent
QUICK_CASES = ("mlp/b1", "resnet18/b1", "bert/b1", "lstm/b1")
QUICK_TRAINING = "train-mlp/b64"


@dataclass(frozen=True)
class Settings:
    repeats: int
    sample_s: float
    timeout_s: float
    quick: bool


def run_worker(script: str, args: list[str], env: dict[str, str], timeout_s: float) -> dict[str, Any]:
    """Run bench/<script> in a fresh process; its JSON result, or {"error": ...}."""
    with tempfile.TemporaryDirectory(prefix="xjit-bench-out-") as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, str(BENCH / script), *args, "--out", str(out)]
        proc = subprocess.Popen(
            cmd,
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # so a timeout also kills compile workers
        )
        try:
            log, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return {"error": f"timed out after {timeout_s:.0f} s: {shlex.join(cmd)}"}
        if proc.returncode != 0 or not out.exists():
            status = f"signal {signal.Signals(-proc.returncode).name}" if proc.returncode < 0 else proc.returncode
            last = log.strip().splitlines()[-1] if log.strip() else ""
            return {"error": f"exit status {status}: {last}\n{shlex.join(cmd)}\n{log[-3000:]}"}
        result: dict[str, Any] = json.loads(out.read_text())
        return result


def cache_env(root: str) -> dict[str, str]:
    return {"TORCHINDUCTOR_CACHE_DIR": f"{root}/inductor", "XJIT_CACHE_DIR": f"{root}/xjit"}


def run_case(case: str, backends: list[str], s: Settings) -> dict[str, Any]:
    row: dict[str, Any] = {"case": case, "backends": {b: {} for b in backends}}
    with tempfile.TemporaryDirectory(prefix="xjit-bench-cache-") as cache:
        env = cache_env(cache)
        for b in backends:
            first = ["first-call", "--case", case, "--backend", b]
            row["backends"][b]["cold"] = run_worker("worker.py", first, env, s.timeout_s)
            if b in COMPILERS:
                row["backends"][b]["warm"] = run_worker("worker.py", first, env, s.timeout_s)
        steady_args = ["steady", "--case", case, "--backends", ",".join(backends)]
        steady_args += ["--repeats", str(s.repeats), "--sample-s", str(s.sample_s)]
        steady = run_worker("worker.py", steady_args, env, s.timeout_s)
    if "error" in steady:
        row["error"] = steady["error"]
        return row
    row["inner_calls"] = steady["inner_calls"]
    for b, result in steady["backends"].items():
        row["backends"][b]["steady"] = result
    return row


def summary(row: dict[str, Any]) -> str:
    ms = {b: report.get(row, b, "steady", "median_s") for b in BACKENDS}
    parts = [f"{row['case']:<12}"] + [f"{b} {report.fmt(v * 1e3 if v else None, suffix=' ms')}" for b, v in ms.items()]
    parts += [f"inductor cold {report.fmt(report.get(row, 'inductor', 'cold', 'first_call_s'), suffix=' s')}"]
    return "  ".join(parts) + ("  ERROR" if "error" in row else "")


def select_cases(models: str | None, quick: bool) -> list[str]:
    if not models:
        return list(QUICK_CASES if quick else CASES)
    wanted = models.split(",")
    unknown = [w for w in wanted if w not in CASES and not any(c.model == w for c in CASES.values())]
    if unknown:
        models_ = sorted({c.model for c in CASES.values()})
        sys.exit(f"unknown models {unknown}; choose from {models_} or cases {sorted(CASES)}")
    cases = [name for name, c in CASES.items() if name in wanted or c.model in wanted]
    if quick:  # the smallest batch of each model (CASES lists batches smallest first)
        firsts: dict[str, str] = {}
        for name in cases:
            firsts.setdefault(CASES[name].model, name)
        cases = list(firsts.values())
    return cases


def select_training(requested: str | None, models: str | None, quick: bool) -> list[str]:
    if requested is None:
        return [] if models else [QUICK_TRAINING] if quick else list(TRAINING_CASES)
    if requested == "none":
        return []
    chosen = requested.split(",")
    if unknown := [c for c in chosen if c not in TRAINING_CASES]:
        sys.exit(f"unknown training cases {unknown}; choose from {list(TRAINING_CASES)}")
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=f"fewer repeats; cases {', '.join(QUICK_CASES)}")
    parser.add_argument("--models", help="comma-separated models or cases (default: all, or the quick set)")
    parser.add_argument("--backends", default=",".join(BACKENDS), help="subset to run; eager is always run")
    parser.add_argument("--out", type=Path, default=BENCH / "results")
    parser.add_argument("--repeats", type=int, help="timing repeats per case (default: 5 quick, 15 full)")
    parser.add_argument(
        "--training",
        help=f"training-step cases ({', '.join(TRAINING_CASES)}) or 'none'; default: all, "
        f"{QUICK_TRAINING} with --quick, none with --models",
    )
    args = parser.parse_args()
    requested = set(args.backends.split(",")) | {"eager"}
    if requested - set(BACKENDS):
        sys.exit(f"unknown backends {sorted(requested - set(BACKENDS))}; choose from {list(BACKENDS)}")
    if args.quick:
        s = Settings(repeats=5, sample_s=0.1, timeout_s=600, quick=True)
    else:
        s = Settings(repeats=15, sample_s=0.25, timeout_s=1800, quick=False)
    if args.repeats is not None:
        if args.repeats < 1:
            sys.exit("--repeats must be at least 1")
        s = Settings(repeats=args.repeats, sample_s=s.sample_s, timeout_s=s.timeout_s, quick=s.quick)
    cases = select_cases(args.models, args.quick)
    training_cases = select_training(args.training, args.models, args.quick)
    started = time.perf_counter()

    probe = run_worker("worker.py", ["probe"], {}, 120)
    if "error" in probe:
        sys.exit(f"cannot start the worker: {probe['error']}")
    xjit = probe["xjit"]
    backends = [b for b in BACKENDS if b in requested and (b != "xjit" or xjit["available"])]
    print(f"{probe['machine']['cpu']}, {probe['machine']['cores']} cores, torch {probe['machine']['torch']}")
    if not xjit["available"]:
        print(f"xjit not available, its column reads n/a: {report.first_line(xjit['reason'])}")

    rows = []
    for case in cases:
        case_started = time.perf_counter()
        try:
            row = run_case(case, backends, s)
        except Exception as exc:
            row = {"case": case, "error": error_text(exc)}
        if not xjit["available"]:
            row.setdefault("backends", {})["xjit"] = {"unavailable": xjit["reason"]}
        row["wall_s"] = time.perf_counter() - case_started
        rows.append(row)
        print(f"{summary(row)}  ({row['wall_s']:.0f} s)", flush=True)

    training: dict[str, Any] = {}
    if training_cases:
        with tempfile.TemporaryDirectory(prefix="xjit-bench-cache-") as cache:
            training_args = ["--cases", ",".join(training_cases), "--backends", ",".join(backends)]
            training_args += ["--repeats", str(s.repeats)]
            training = run_worker("training.py", training_args, cache_env(cache), s.timeout_s)
        print(report.training_summary(training), flush=True)

    with tempfile.TemporaryDirectory(prefix="xjit-bench-cache-") as cache:
        micro_args = ["--backends", ",".join(backends)] + (["--quick"] if args.quick else [])
        micro = run_worker("micro.py", micro_args, cache_env(cache), s.timeout_s)

    results = {
        "command": shlex.join(["python", "bench/run.py", *sys.argv[1:]]),
        "settings": asdict(s),
        "machine": probe["machine"],
        "loadavg_1m_at_end": os.getloadavg()[0],
        "wall_s": time.perf_counter() - started,
        "xjit": xjit,
        "cases": rows,
        "training": training,
        "micro": micro,
    }
    report.write(results, args.out)
    print(f"wrote {args.out}/results.json, results.md and charts in {results['wall_s']:.0f} s")


if __name__ == "__main__":
    main()
