"""One measurement in a fresh process, started by run.py; writes its result as JSON to --out.

first-call: one backend alone: first-call (compile) time, peak RSS, graph counts, cache hits.
steady:     all backends in this one process on the same inputs, interleaved: medians, max error.
probe:      the machine description and whether xjit is usable.
Cache locations come from the environment (TORCHINDUCTOR_CACHE_DIR, XJIT_CACHE_DIR).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from bench.common import (
    children_peak_rss_mb,
    describe_machine,
    error_text,
    interleave,
    load_xjit,
    make_backend,
    max_errors,
    prepare,
    reset_peak_rss,
    rss_mb,
    setup_threads,
    time_per_call,
)
from bench.models import CASES


def inductor_stats() -> dict[str, Any]:
    from torch._dynamo.utils import counters

    breaks = counters["graph_break"]
    return {
        "graphs": counters["stats"]["unique_graphs"],
        "graph_breaks": sum(breaks.values()),
        "break_reasons": [reason.splitlines()[0] for reason in breaks][:10],
        "cache_hits": counters["inductor"]["fxgraph_cache_hit"] + counters["aot_autograd"]["autograd_cache_hit"],
        "cache_misses": counters["inductor"]["fxgraph_cache_miss"] + counters["aot_autograd"]["autograd_cache_miss"],
    }


def _count(report: Any, count_attr: str, list_attr: str) -> int | None:
    count = getattr(report, count_attr, None)
    if isinstance(count, int):
        return count
    items = getattr(report, list_attr, None)
    return len(items) if items is not None else None


def xjit_stats(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> dict[str, Any]:
    try:
        report = load_xjit().explain(model)(*inputs)
    except Exception as exc:
        return {"explain_error": error_text(exc)}
    return {
        "graphs": _count(report, "graph_count", "graphs"),
        "graph_breaks": _count(report, "graph_break_count", "graph_breaks"),
        "explain": str(report)[:4000],
    }


def first_call(case: str, backend: str, steady_calls: int) -> dict[str, Any]:
    model, inputs = CASES[case].build()
    result: dict[str, Any] = {"rss_after_build_mb": rss_mb()}
    with torch.no_grad():
        fn = make_backend(backend, model)
        result["peak_rss_resettable"] = reset_peak_rss()
        start, cpu = time.perf_counter(), time.process_time()
        fn(*inputs)
        result["first_call_s"] = time.perf_counter() - start
        result["first_call_cpu_s"] = time.process_time() - cpu
        result["peak_rss_first_call_mb"] = rss_mb("VmHWM")
        reset_peak_rss()
        later, later_cpu = [], []
        for _ in range(steady_calls):
            start, cpu = time.perf_counter(), time.process_time()
            fn(*inputs)
            later.append(time.perf_counter() - start)
            later_cpu.append(time.process_time() - cpu)
        result["peak_rss_steady_mb"] = rss_mb("VmHWM")
        # What the first call costs over a later call of the same backend in the same process
        # (compile or cache loading, one-time library set-up, first touch of memory): the
        # part a compiler controls, fair to a model whose every call is slow.
        if later:
            result["later_call_s"] = statistics.median(later)
            result["first_call_overhead_s"] = result["first_call_s"] - result["later_call_s"]
            # The same in CPU time (all threads): steadier than wall time on a loaded machine,
            # where a call's wall time swings 2x between processes.
            cpu_overhead = result["first_call_cpu_s"] - statistics.median(later_cpu)
            result["first_call_cpu_overhead_s"] = cpu_overhead
        # What the resident set is made of: anonymous memory (heap, tensors, JIT code) is the
        # process's own; file pages (shared libraries' code and tables) are page cache, shared
        # with every process mapping the same files and reclaimable.
        result["rss_anon_mb"] = rss_mb("RssAnon")
        result["rss_file_mb"] = rss_mb("RssFile")
        result["children_peak_rss_mb"] = children_peak_rss_mb()
        if backend == "inductor":
            result.update(inductor_stats())
        elif backend == "xjit":
            result.update(xjit_stats(model, inputs))
    return result


def steady(case: str, backends: list[str], repeats: int, sample_s: float) -> dict[str, Any]:
    model, inputs = CASES[case].build()
    with torch.no_grad():
        ref = model(*inputs)
        fns, outputs, errors = prepare(backends, model, inputs)
        inner = max(1, round(sample_s / time_per_call(fns["eager"], 3)))
        samples = interleave(fns, repeats, inner, errors)
    per: dict[str, dict[str, Any]] = {b: {} for b in backends}
    for b, out in outputs.items():
        per[b].update(max_errors(out, ref))
    for b, s in samples.items():
        per[b].update(samples_s=s, median_s=statistics.median(s))
    for b, text in errors.items():
        per[b] = {"error": text}
    return {"inner_calls": inner, "repeats": repeats, "backends": per}


def probe() -> dict[str, Any]:
    """The machine, and whether xjit can be used (and if not, why)."""
    result: dict[str, Any] = {"machine": describe_machine()}
    try:
        xjit = load_xjit()
    except Exception as exc:
        result["xjit"] = {"available": False, "reason": error_text(exc)}
        return result
    try:
        version = str(xjit.__version__)
    except Exception:
        version = "unknown"
    result["xjit"] = {"available": True, "version": version}
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("probe", "first-call", "steady"))
    parser.add_argument("--case", choices=sorted(CASES))
    parser.add_argument("--backend", default="eager")
    parser.add_argument("--backends", default="eager,inductor")
    parser.add_argument("--steady-calls", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--sample-s", type=float, default=0.2)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    setup_threads()
    if args.mode == "probe":
        result = probe()
    elif args.mode == "first-call":
        result = first_call(args.case, args.backend, args.steady_calls)
    else:
        result = steady(args.case, args.backends.split(","), args.repeats, args.sample_s)
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
