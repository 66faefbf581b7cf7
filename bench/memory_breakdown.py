"""Where a compiled model's resident memory goes: RSS after each stage, and by mapping.

    python bench/memory_breakdown.py [--case bert/b1] [--backend xjit|eager|inductor] [--calls 3]

Runs in one process (start a fresh one per case/backend): RSS (and its high-water mark, reset
before each stage by writing 5 to /proc/self/clear_refs) after importing torch, building the
model, importing the backend, the first call (capture + compile + run) and steady-state calls;
then, from /proc/self/smaps, the resident and private (clean or dirty, mapped by this process only) memory of each shared library and of the
anonymous mappings (heap: tensors, Python objects, the compiler's data), largest first. The
difference between the backends' rows is the memory a backend adds; `docs/perf.md` (memory
section) records the figures.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import re
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import reset_peak_rss, rss_mb, setup_threads  # noqa: E402 - after sys.path

_HEADER = re.compile(r"^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \S+\s*(.*)$")


def mappings_kb() -> dict[str, dict[str, int]]:
    """Rss / Private (clean + dirty) kB per mapped file (basename) or '[anon]' / '[heap]' / ..."""
    per: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    name = "?"
    for line in Path("/proc/self/smaps").read_text().splitlines():
        header = _HEADER.match(line)
        if header:
            path = header.group(1).strip()
            name = os.path.basename(path) if path.startswith("/") else (path or "[anon]")
            continue
        key, _, value = line.partition(":")
        if key in ("Rss", "Private_Clean", "Private_Dirty"):
            per[name]["private" if key != "Rss" else "rss"] += int(value.split()[0])
    return per


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def malloc_mb() -> tuple[float, float]:
    """glibc malloc: (bytes in use, bytes held free by the allocator) in MB, all arenas."""
    info = ctypes.CDLL(None).mallinfo2
    info.restype = _MallInfo2
    m = info()
    return (m.uordblks + m.hblkhd) / 2**20, m.fordblks / 2**20


Row = tuple[str, float, float, float, float, float]


def stage(label: str, table: list[Row]) -> None:
    table.append((label, rss_mb(), rss_mb("VmHWM"), rss_mb("RssAnon"), *malloc_mb()))
    reset_peak_rss()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", default="mlp/b1")
    parser.add_argument("--backend", default="xjit", choices=("eager", "xjit", "inductor"))
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--top", type=int, default=12, help="mappings to list")
    args = parser.parse_args()

    table: list[Row] = []
    reset_peak_rss()
    import torch

    from bench.common import make_backend
    from bench.models import CASES

    setup_threads()
    stage("import torch", table)
    model, inputs = CASES[args.case].build()
    params_mb = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
    stage(f"build model ({params_mb:.0f} MB of parameters)", table)
    with torch.no_grad():
        fn = make_backend(args.backend, model)
        stage(f"wrap with {args.backend}", table)
        fn(*inputs)
        stage("first call", table)
        for _ in range(args.calls):
            fn(*inputs)
        gc.collect()
        stage(f"{args.calls} steady calls", table)

    print(f"{args.case} {args.backend}: after each stage (MB): RSS, its peak during the stage, its anonymous")
    print("part (the rest: file pages of shared libraries), glibc malloc's bytes in use and held free")
    for label, rss, peak, anon, used, free in table:
        print(
            f"  {label:<40} rss {rss:6.1f}  peak {peak:6.1f}  anon {anon:6.1f}"
            f"  malloc used {used:6.1f}  free {free:5.1f}"
        )
    if args.backend == "xjit":
        import xjit.ir

        stats = xjit.ir.backend_stats()
        print(
            f"xjit gave back the compiler's pages and free heap {stats.get('memory_releases', 0)} time(s):"
            f" {stats.get('memory_released_mb', 0)} MB of RSS in {stats.get('memory_release_ms', 0):.1f} ms"
            " (XJIT_RELEASE_MEMORY=0: off; docs/runtime.md)"
        )
    per = mappings_kb()
    total = sum(v["rss"] for v in per.values())
    print(f"resident by mapping (MB; total {total / 1024:.1f}), largest {args.top}:")
    for name, v in sorted(per.items(), key=lambda kv: -kv[1]["rss"])[: args.top]:
        print(f"  {name:<48} rss {v['rss'] / 1024:8.1f}   private {v['private'] / 1024:8.1f}")


if __name__ == "__main__":
    main()
