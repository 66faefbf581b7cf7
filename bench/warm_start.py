"""Warm start from the persistent compile cache, part by part.

Runs one model's first call under xjit.jit in fresh processes: once with an empty cache
directory (cold: fills it), then --repeats times reusing it (warm). Each process reports the
first call's wall time and its parts:

  capture   the bytecode analyzer (explain's capture_ms)
  compile   the inference passes, the runtime's passes and instruction table, the kernels
            (explain's compile_ms), of which
  llvm      kernels compiled by LLVM (backend_stats' llvm_ms; 0 when warm) and
  link      kernels loaded from the cache and linked (cache_link_ms)
  run       the rest of the first call: running it, including oneDNN primitive creation and
            weight packing (first call - capture - compile), against
  steady    the median of later calls;
  overhead  first call - steady: what the first call costs over a later one, the part a
            compiler controls (a model whose one call takes 176 ms cannot start in 200 ms), and
  faults    minor page faults of the first call (a later call of the same process has ~0):
            first touch of fresh memory (results, the arena, oneDNN's buffers);
  first_cpu, overhead_cpu  the first call and the overhead in CPU time of the process (all
            threads): steadier than wall time on a loaded machine (run with --threads 1);
  main_cpu  the first call's CPU time on the calling thread alone: with --threads 1, the work
            on the first call's critical path (the gemm warm-up's thread, docs/runtime.md
            "Warm start", moves work off it: process CPU stays, the wall time on an idle
            machine falls);
  gemm      oneDNN gemm plans made (a frame with some leaves a mark for the next process) /
            gemm warm-up threads started (1: a mark from an earlier process was found).

Usage: python bench/warm_start.py [--case bert/b1] [--repeats 3] [--threads N]
                                  [--compare-env NAME=VALUE]
Figures go to docs/perf.md (with the machine's load: ratios on a loaded machine are noisy).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def child(case: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    import torch

    sys.path.insert(0, str(ROOT))
    from bench.common import load_xjit, setup_threads
    from bench.models import CASES

    xjit = load_xjit()
    from xjit import _frontend, ir

    import_s = time.perf_counter() - t0
    setup_threads()
    if os.environ.get("XJIT_NUM_THREADS"):  # --threads: torch's pool too, not only xjit's
        torch.set_num_threads(int(os.environ["XJIT_NUM_THREADS"]))
    model, inputs = CASES[case].build()
    with torch.no_grad():
        fn = xjit.jit(model)
        _frontend.reset()
        _frontend.set_recording(True)
        faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start, cpu_start = time.perf_counter(), time.process_time()
        main_start = time.thread_time()
        fn(*inputs)
        first_ms = (time.perf_counter() - start) * 1e3
        first_cpu_ms = (time.process_time() - cpu_start) * 1e3
        main_cpu_ms = (time.thread_time() - main_start) * 1e3
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0
        _frontend.set_recording(False)
        events = _frontend.events()
        steady, steady_cpu = [], []
        for _ in range(5):
            start, cpu_start = time.perf_counter(), time.process_time()
            fn(*inputs)
            steady.append((time.perf_counter() - start) * 1e3)
            steady_cpu.append((time.process_time() - cpu_start) * 1e3)
    capture = sum(g["capture_ms"] for g in events["graphs"])
    compile_ms = sum(g["compile_ms"] for g in events["graphs"])
    stats = ir.backend_stats()
    return {
        "import_s": import_s,
        "graphs": len(events["graphs"]),
        "first_call_ms": first_ms,
        "capture_ms": capture,
        "compile_ms": compile_ms,
        "llvm_ms": stats["llvm_ms"],
        "link_ms": stats["cache_link_ms"],
        "run_ms": first_ms - capture - compile_ms,
        "steady_ms": statistics.median(steady),
        "overhead_ms": first_ms - statistics.median(steady),
        "faults": faults,
        "first_cpu_ms": first_cpu_ms,
        "main_cpu_ms": main_cpu_ms,
        "steady_cpu_ms": statistics.median(steady_cpu),
        "overhead_cpu_ms": first_cpu_ms - statistics.median(steady_cpu),
        "llvm_compilations": stats["llvm_compilations"],
        "cache_links": stats["cache_links"],
        "gemm_plans": stats.get("library_gemm_plans", 0),
        "gemm_warm_ups": stats.get("gemm_warm_ups", 0),
    }


def run_child(
    case: str, cache: Path, threads: int | None, extra_env: dict[str, str] | None = None
) -> dict[str, Any]:
    env = dict(os.environ, XJIT_CACHE_DIR=str(cache), **(extra_env or {}))
    env.pop("XJIT_NO_CACHE", None)
    if threads:
        env["XJIT_NUM_THREADS"] = env["OMP_NUM_THREADS"] = str(threads)
    proc = subprocess.run(
        # -S as in this process (a development build on PYTHONPATH, not the installed one).
        [sys.executable, *(["-S"] if sys.flags.no_site else []), __file__, "--child", "--case", case],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-4000:])
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


COLUMNS = (
    "first_call_ms",
    "capture_ms",
    "compile_ms",
    "llvm_ms",
    "link_ms",
    "run_ms",
    "steady_ms",
    "overhead_ms",
    "faults",
    "first_cpu_ms",
    "overhead_cpu_ms",
    "main_cpu_ms",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--case", default="bert/b1", help="a case of bench/models.py, e.g. bert/b1")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument(
        "--compare-env",
        default=None,
        help="NAME=VALUE: also run warm processes with this variable set, alternating with the "
        "plain ones (an A/B of one switch, e.g. XJIT_LINK_BATCH=0, under the same load)",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.case)))
        return
    with tempfile.TemporaryDirectory(prefix="xjit-warm-start-") as tmp:
        cache = Path(tmp)
        cold = run_child(args.case, cache, args.threads)
        other_env = dict([args.compare_env.split("=", 1)]) if args.compare_env else None
        warm, other = [], []
        for _ in range(args.repeats):
            warm.append(run_child(args.case, cache, args.threads))
            if other_env:
                other.append(run_child(args.case, cache, args.threads, other_env))
    print(f"{args.case}: {cold['graphs']} graph(s); load average {os.getloadavg()[0]:.1f}")
    print(
        "phase  "
        + " ".join(f"{c.removesuffix('_ms'):>12}" for c in COLUMNS)
        + "   llvm kernels / cached   gemm plans / warm-ups"
    )
    print(
        "cold   "
        + " ".join(f"{cold[c]:12.1f}" for c in COLUMNS)
        + f"   {cold['llvm_compilations']} / {cold['cache_links']}"
        + f"   {cold['gemm_plans']} / {cold['gemm_warm_ups']}"
    )
    for label, runs in (("warm", warm), ("warm*", other)):
        if not runs:
            continue
        med = {c: statistics.median(w[c] for w in runs) for c in COLUMNS}
        print(
            f"{label:7s}"
            + " ".join(f"{med[c]:12.1f}" for c in COLUMNS)
            + f"   {runs[-1]['llvm_compilations']} / {runs[-1]['cache_links']}"
            + f"   {runs[-1]['gemm_plans']} / {runs[-1]['gemm_warm_ups']}"
            + f"   (median of {len(runs)})"
        )
    if other:
        print(f"warm* = with {args.compare_env}")


if __name__ == "__main__":
    main()
