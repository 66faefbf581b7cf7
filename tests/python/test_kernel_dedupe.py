"""Identical kernels compile once per process also with the persistent cache off (XJIT_NO_CACHE=1):
Jit::compile keys every kernel like the cache (printed loop IR, name, target, options) and shares a
live or same-graph identical kernel's code (docs/backend.md, "Identical kernels share one linked
copy"). Kernels that differ only in a constant still compile apart and compute their own values."""

import pytest
import torch

import xjit
import xjit.ir as ir


def _deltas(before: dict, after: dict) -> dict:
    return {k: after[k] - before[k] for k in ("llvm_compilations", "kernels_shared", "cache_writes")}


def test_identical_fusions_compile_once_without_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XJIT_NO_CACHE", "1")
    scale = float(torch.randint(2, 10**6, ()).item()) / 7.0  # a kernel no earlier test compiled

    def same(x: torch.Tensor) -> torch.Tensor:
        for _ in range(4):  # 4 fusions of one text, cut apart by cumsum
            x = torch.cumsum(torch.tanh(x * scale) + 1.0, 0)
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
            x = torch.cumsum(torch.tanh(x * (base + i)) + 1.0, 0)
        return x

    x = torch.randn(16, 8)
    before = ir.backend_stats()
    out = xjit.jit(distinct)(x)
    d = _deltas(before, ir.backend_stats())
    torch.testing.assert_close(out, distinct(x))  # a wrongly shared kernel computes another step
    assert d["llvm_compilations"] == 4
    assert d["kernels_shared"] == 0
