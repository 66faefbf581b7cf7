"""Identical kernels compile once per process also with the persistent cache off (XJIT_NO_CACHE=1):
Jit::compile keys every kernel like the cache (printed loop IR, name, target, options) and shares a
live or same-graph identical kernel's code (docs/backend.md, "Identical kernels share one linked
copy"). Kernels that differ only in a constant still compile apart and compute their own values."""

import pytest
import torch
import torch.nn.functional as F

import xjit
import xjit.ir as ir


def _deltas(before: dict, after: dict) -> dict:
    return {k: after[k] - before[k] for k in ("llvm_compilations", "kernels_shared", "cache_writes")}


def test_identical_fusions_compile_once_without_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XJIT_NO_CACHE", "1")
    scale = float(torch.randint(2, 10**6, ()).item()) / 7.0  # a kernel no earlier test compiled

    def same(x: torch.Tensor) -> torch.Tensor:
        for _ in range(4):  # 4 fusions of one text, cut apart by cumprod (a reference kernel)
            x = torch.cumprod(torch.tanh(x * scale) + 1.0, 0)
        return x

    x = torch.randn(16, 8)
    before = ir.backend_stats()
    out = xjit.jit(same)(x)
    d = _deltas(before, ir.backend_stats())
    torch.testing.assert_close(out, same(x))
    assert d["llvm_compilations"] == 1
    assert d["kernels_shared"] == 3
    assert d["cache_writes"] == 0


def test_fusions_differing_in_a_constant_compile_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XJIT_NO_CACHE", "1")
    base = float(torch.randint(2, 10**6, ()).item()) / 7.0

    def distinct(x: torch.Tensor) -> torch.Tensor:
        for i in range(4):  # the same ops, a different constant in each fusion
            x = torch.cumprod(torch.tanh(x * (base + i)) + 1.0, 0)
        return x

    x = torch.randn(16, 8)
    before = ir.backend_stats()
    out = xjit.jit(distinct)(x)
    d = _deltas(before, ir.backend_stats())
    torch.testing.assert_close(out, distinct(x))  # a wrongly shared kernel computes another step
    assert d["llvm_compilations"] == 4
    assert d["kernels_shared"] == 0


def test_identical_kernels_share_one_executable() -> None:
    # An unrolled recurrence (an LSTM over 64 steps) has the same kernels at every step; each
    # instruction held its own loop IR twice (~20 KB per step for a matrix-vector reduction)
    # before the target shared the whole executable.
    torch.manual_seed(3)
    w, x = torch.randn(256, 256) / 16, torch.randn(1, 256)
    scale = float(torch.randint(2, 10**6, ()).item()) / 7.0  # kernels no earlier test compiled

    def unrolled(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        for _ in range(24):
            x = torch.tanh(F.linear(x, w) * scale)
        return x

    before = ir.backend_stats()["kernel_executables_shared"]
    compiled = xjit.jit(unrolled)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, w), unrolled(x, w))
    # Every step after the first reuses the first step's kernels (one or two, as fusion decides).
    shared = ir.backend_stats()["kernel_executables_shared"] - before
    assert shared >= 23 and shared % 23 == 0, shared
