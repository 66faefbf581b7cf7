"""What giving the compiler's memory back after a compile costs (docs/perf.md, "Session 5: memory").

    python bench/release_cost.py [--repeats 5] [--graphs 6] [--case mlp/b1]

After the first run of a newly compiled graph, xjit drops the compiler's code pages from the
process's page tables and trims malloc's free heap (xjit/backend/release_memory.h). The next
compile maps LLVM's (and oneDNN's) code again from the page cache, and the first steady call
maps the runtime's. XJIT_RELEASE_MEMORY is read once per process, so this runs child processes
with it on and off, alternating, and reports medians over the repeats of:
  - compile: the first call of each of `--graphs` new graphs compiled one after the other (chains
    of 10 elementwise ops and multiplies, new code and shape each, compile cache off): every one after the first starts
    from released memory;
  - model: the case's first call, then its second call (the first after the release) and the
    median of 20 later calls, and the steady RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def child(case: str, graphs: int) -> dict[str, object]:
    import torch

    from bench.common import load_xjit, rss_mb, setup_threads
    from bench.models import CASES

    setup_threads()
    xjit = load_xjit()
    ops = ("sin", "cos", "tanh", "sigmoid")

    def chain(i: int):  # a new code object per graph: xjit captures per code object
        body = "".join(f"    x = torch.{ops[k % 4]}(x) * {i + 2}\n" for k in range(10))
        scope: dict[str, object] = {"torch": torch}
        exec(f"def chain(x):\n{body}    return x\n", scope)
        return scope["chain"]

    compile_ms, compile_cpu_ms, compile_faults = [], [], []
    with torch.no_grad():
        for i in range(graphs + 1):
            fn, x = xjit.jit(chain(i)), torch.randn(1000 + 17 * i)
            t0, c0, f0 = time.perf_counter(), time.process_time(), _minor_faults()
            fn(x)
            compile_ms.append((time.perf_counter() - t0) * 1e3)
            compile_cpu_ms.append((time.process_time() - c0) * 1e3)
            compile_faults.append(_minor_faults() - f0)
        model, inputs = CASES[case].build()
        fn = xjit.jit(model)
        t0 = time.perf_counter()
        fn(*inputs)
        t1, f1 = time.perf_counter(), _minor_faults()
        fn(*inputs)
        t2, f2 = time.perf_counter(), _minor_faults()
        later = []
        for _ in range(20):
            s = time.perf_counter()
            fn(*inputs)
            later.append(time.perf_counter() - s)
    stats = xjit.ir.backend_stats()
    return {
        # The first graph pays for loading the compiler: left out.
        "compile_ms": statistics.median(compile_ms[1:]),
        "compile_cpu_ms": statistics.median(compile_cpu_ms[1:]),
        "compile_faults": statistics.median(compile_faults[1:]),
        "model_first_ms": (t1 - t0) * 1e3,
        "model_second_ms": (t2 - t1) * 1e3,
        "model_second_faults": f2 - f1,
        "model_steady_ms": statistics.median(later) * 1e3,
        "rss_mb": rss_mb(),
        "releases": stats["memory_releases"],
        "release_ms": stats["memory_release_ms"] / max(1, stats["memory_releases"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--graphs", type=int, default=6)
    parser.add_argument("--case", default="mlp/b1")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.case, args.graphs)))
        return
    runs: dict[str, list[dict[str, float]]] = {"on": [], "off": []}
    for r in range(args.repeats):
        for mode in (("on", "off") if r % 2 == 0 else ("off", "on")):
            env = dict(os.environ, XJIT_RELEASE_MEMORY="1" if mode == "on" else "0", XJIT_NO_CACHE="1")
            cmd = [sys.executable, __file__, "--child", "--case", args.case, "--graphs", str(args.graphs)]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
            runs[mode].append(json.loads(out.strip().splitlines()[-1]))
    print(f"{args.case}, {args.repeats} processes each, medians; release on / off:")
    for key in runs["on"][0]:
        on = statistics.median(float(x[key]) for x in runs["on"])
        off = statistics.median(float(x[key]) for x in runs["off"])
        print(f"  {key:<16} {on:9.2f} / {off:9.2f}")


if __name__ == "__main__":
    main()
