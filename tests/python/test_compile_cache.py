"""The persistent compile cache across processes: a second process running the same program
with the cache filled by the first skips LLVM entirely (xjit.ir.backend_stats()'s
llvm_compilations stays 0) and computes the same results as eager PyTorch; XJIT_CACHE_MAX_MB
bounds the directory (docs/backend.md, "Persistent compile cache")."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_cached_program

from xjit import ir

pytest.importorskip("torch")

# A model with fused elementwise chains, a row reduction (softmax), a full reduction and a
# matmul (oneDNN, no LLVM): each of its LLVM kernels must come from the cache the second time.
PROGRAM = """
import json, sys, torch, xjit
from xjit import ir

def f(x, w):
    h = torch.tanh(x @ w) * 0.5 + 1.0
    p = torch.softmax(h * h, dim=-1)
    return p, (h - p).abs().sum()

torch.manual_seed(0)
x, w = torch.randn(33, 48), torch.randn(48, 40)
with torch.no_grad():
    got = xjit.jit(f, fullgraph=True)(x, w)
    want = f(x, w)
close = all(torch.allclose(g, e, rtol=1e-4, atol=1e-4) for g, e in zip(got, want))
print(json.dumps({"close": close, **ir.backend_stats()}))
"""


def _run(tmp_path: Path, **env_extra: str) -> dict[str, float]:
    return run_cached_program(PROGRAM, tmp_path, **env_extra)


def test_second_process_skips_llvm(tmp_path: Path) -> None:
    cold = _run(tmp_path)
    assert cold["close"]
    assert cold["llvm_compilations"] > 0
    assert cold["cache_writes"] == cold["llvm_compilations"]
    warm = _run(tmp_path)
    assert warm["close"]
    assert warm["llvm_compilations"] == 0
    assert warm["cache_hits"] == cold["llvm_compilations"]
    assert warm["cache_writes"] == 0
    assert warm["cache_links"] == warm["cache_hits"] and warm["llvm_ms"] == 0
    # The graph's kernels (several, some of one name) were linked together, once per process:
    # "close" above fails if any of them runs another kernel's code.
    assert cold["batch_links"] == warm["batch_links"] == 1
    assert warm["batched_objects"] == warm["cache_links"] >= 2


def test_no_cache_compiles_again(tmp_path: Path) -> None:
    cold = _run(tmp_path)
    again = _run(tmp_path, XJIT_NO_CACHE="1")
    assert again["close"]
    assert again["llvm_compilations"] == cold["llvm_compilations"] > 0
    assert again["cache_hits"] == 0


def test_size_bound_evicts(tmp_path: Path) -> None:
    # A bound below one run's entries (two kernels, about 2 and 5 KB): stores trim the
    # directory as they go, the program still computes the right results, and what is left
    # fits the bound.
    bound_mb = 0.004
    stats = _run(tmp_path, XJIT_CACHE_MAX_MB=str(bound_mb))
    assert stats["close"]
    assert stats["cache_evictions"] > 0
    entries = list((tmp_path / "cache").glob("*.o"))
    assert sum(p.stat().st_size for p in entries) <= bound_mb * 1024 * 1024
    assert not list((tmp_path / "cache").glob("*.tmp.*"))


def test_backend_stats_in_process() -> None:
    stats = ir.backend_stats()
    assert set(stats) == {
        "llvm_compilations",
        "llvm_ms",
        "cache_links",
        "cache_link_ms",
        "general_versions",
        "batch_links",
        "batched_objects",
        "kernels_shared",
        "kernel_executables_shared",
        "target_machines",
        "llvm_engine_loads",
        "llvm_engine_unloads",
        "llvm_engine_load_ms",
        "library_kernels_shared",
        "library_plans",
        "library_generic_plans",
        "library_gemm_plans",
        "gemm_warm_ups",
        "gemm_warm_ups_at_plans",
        "gemm_kernels_pending",
        "llvm_engine_preloads",
        "host_buffers_ahead",
        "host_buffers_ahead_used",
        "host_buffer_fresh_mb",
        "host_buffer_reused_mb",
        "host_buffer_remaps",
        "host_buffer_mappings",
        "host_buffer_lends",
        "cache_hits",
        "cache_misses",
        "cache_writes",
        "cache_invalid",
        "cache_evictions",
        "weight_packs",
        "weight_pack_hits",
        "weight_reorders",
        "weights_in_place",
        "memory_releases",
        "memory_released_mb",
        "memory_release_ms",
    }
    assert all(v >= 0 for v in stats.values())
    assert isinstance(stats["llvm_compilations"], int)
