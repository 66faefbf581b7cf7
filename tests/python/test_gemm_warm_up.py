"""oneDNN's gemm kernels made ahead across processes (xjit/backend/library_warm_up.h): a frame
whose graph ran a plan on oneDNN's gemm implementation leaves a mark in the compile cache; the
next process that captures the same frame starts making gemm's kernels on a thread of its own
before the capture. Results are eager's either way, and a process ends normally whether it
exits while that thread works or not; a child forked after it computes gemm products too
(docs/runtime.md "Warm start")."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_cached_program


pytest.importorskip("torch")

# q @ k^T with q and k split from one [S, 3D] projection (GPT-2's c_attn): rows 3D apart, which
# oneDNN 2.6's brgemm matmul refuses, so the product runs on gemm:jit. `dense` instead runs a
# product on a transposed contiguous rhs, as linear's weight (brgemm, no gemm plan; a row-major
# rhs would take gemm too: dnnl_matmul.cpp preferGemm).
PROGRAM = """
import json, sys, torch, xjit
from xjit import ir

def attention_scores(x):
    q, k, v = x.split(64, dim=2)
    q = q.view(1, 16, 4, 16).transpose(1, 2)
    k = k.view(1, 16, 4, 16).transpose(1, 2)
    return (q @ k.transpose(-1, -2)) * 0.25

def dense(a, b):
    return torch.relu(a @ b.t())

torch.manual_seed(0)
x = torch.randn(1, 16, 192)
a, b = torch.randn(24, 32), torch.randn(40, 32)
fn, args = (attention_scores, (x,)) if sys.argv[1] == "strided" else (dense, (a, b))
with torch.no_grad():
    got = xjit.jit(fn, fullgraph=True)(*args)
    want = fn(*args)
close = torch.allclose(got, want, rtol=1e-5, atol=1e-5)
if len(sys.argv) > 2 and sys.argv[2] == "fork":  # a child computes another gemm product
    import os
    pid = os.fork()
    if pid == 0:
        def rows_192_apart(x):
            return x[:, :, :64] @ x[:, :, 64:128].transpose(-1, -2)
        try:
            with torch.no_grad():
                got = xjit.jit(rows_192_apart, fullgraph=True)(x)
            ok = torch.allclose(got, rows_192_apart(x), rtol=1e-5, atol=1e-5)
            ok = ok and ir.backend_stats()["library_gemm_plans"] >= 2
        except BaseException:
            ok = False
        os._exit(0 if ok else 3)
    close = close and os.waitpid(pid, 0)[1] == 0
print(json.dumps({"close": close, **ir.backend_stats()}), flush=True)
if len(sys.argv) > 2 and sys.argv[2] != "fork":  # exit while the warm-up thread may still work
    import os
    os._exit(0) if sys.argv[2] == "_exit" else sys.exit(0)
"""


def _run(tmp_path: Path, *args: str, **env_extra: str) -> dict[str, float]:
    stats: dict[str, float] = run_cached_program(PROGRAM, tmp_path, *args, **env_extra)
    assert stats["close"]
    return stats


def _marks(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "cache").glob("*.mark"))


def test_a_frame_with_gemm_plans_warms_up_the_next_process(tmp_path: Path) -> None:
    first = _run(tmp_path, "strided")
    assert first["library_gemm_plans"] >= 1
    assert first["gemm_warm_ups"] == 0  # no mark yet: the gemm plan starts it
    assert first["gemm_warm_ups_at_plans"] == 1
    assert len(_marks(tmp_path)) == 1
    second = _run(tmp_path, "strided")
    assert second["gemm_warm_ups"] == 1 and second["gemm_warm_ups_at_plans"] == 0
    assert len(_marks(tmp_path)) == 1


def test_a_frame_without_gemm_plans_leaves_no_mark(tmp_path: Path) -> None:
    first = _run(tmp_path, "dense")
    assert first["library_plans"] >= 1 and first["library_gemm_plans"] == 0
    assert _marks(tmp_path) == []
    assert _run(tmp_path, "dense")["gemm_warm_ups"] == 0
    # Another frame's mark does not start the thread for this one.
    _run(tmp_path, "strided")
    assert _run(tmp_path, "dense")["gemm_warm_ups"] == 0


def test_switched_off_and_without_a_cache(tmp_path: Path) -> None:
    _run(tmp_path, "strided")
    off = _run(tmp_path, "strided", XJIT_GEMM_WARMUP="0")
    assert off["gemm_warm_ups"] == 0 and off["gemm_warm_ups_at_plans"] == 0
    # No cache: no mark is read, none is written; the gemm plan starts the thread.
    assert _run(tmp_path, "strided", XJIT_NO_CACHE="1")["gemm_warm_ups"] == 0
    other = tmp_path / "other"
    other.mkdir()
    _run(other, "strided", XJIT_NO_CACHE="1")
    assert not (other / "cache").exists() or _marks(other) == []


@pytest.mark.parametrize("how", ["exit", "_exit", "fork"])
def test_process_exits_or_forks_while_the_thread_works(tmp_path: Path, how: str) -> None:
    # One OpenMP thread: a child forked after GNU OpenMP's pool has started hangs at its first
    # parallel region, with or without this thread (XJIT_GEMM_WARMUP=0 hangs too).
    one = {"OMP_NUM_THREADS": "1", "XJIT_NUM_THREADS": "1"} if how == "fork" else {}
    _run(tmp_path, "strided")
    stats = _run(tmp_path, "strided", how, **one)
    assert stats["gemm_warm_ups"] == 1


@pytest.mark.parametrize("how", ["exit", "_exit"])
def test_first_process_exits_while_the_plans_thread_works(tmp_path: Path, how: str) -> None:
    # No mark: the gemm plan starts the thread, and the program ends at once, while oneDNN
    # makes its kernels (and the statics it constructs there) on it. The frontend's atexit
    # callback waits for it before the interpreter's teardown (a segfault at exit otherwise).
    for _ in range(3):
        stats = _run(tmp_path, "strided", how, XJIT_NO_CACHE="1")
        assert stats["gemm_warm_ups_at_plans"] == 1
