"""Compile time of bench/micro.py's elementwise chain (sin/cos/tanh/sigmoid in turn, N ops) for
xjit alone: the first call's wall time and calling-thread CPU time, in this process after a
warm-up compile, with a fresh compile cache. Run it in alternation with another build (a copy of
the build's python/xjit directory on PYTHONPATH, its libxjit_native.so on LD_LIBRARY_PATH) to
compare two builds on a loaded machine.

    python bench/compile_chain.py [N]     # default N = 100
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

os.environ["XJIT_CACHE_DIR"] = tempfile.mkdtemp()
os.environ.setdefault("XJIT_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from bench.common import make_backend
from bench.micro import chain


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    torch.set_num_threads(1)
    with torch.no_grad():
        make_backend("xjit", lambda x: torch.tanh(x) + 1)(torch.randn(8, 8))  # warm-up
        fn = make_backend("xjit", chain("elementwise", n))
        x = torch.randn(64, 64)
        wall, cpu = time.perf_counter(), time.thread_time()
        y = fn(x)
        wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
        err = (y - chain("elementwise", n)(x)).abs().max().item()
    print(f"N={n}: first call {wall:.3f} s wall, {cpu:.3f} s thread CPU; max |xjit - eager| {err:.2g}")


if __name__ == "__main__":
    main()
