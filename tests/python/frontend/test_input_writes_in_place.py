"""Writes to a few elements of a large input (a KV cache's new row) under backend="xjit": the
runtime's reinplace pass computes the written-back output in the input's own memory, so a call
neither copies the input nor allocates its size (docs/passes.md, reinplace). Every form still
gives eager's values, in the caller's tensor and in what the function returns, also where the
pass must refuse (old contents read after the write, values overlapping the target, a
transposed cache whose reshape copies)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from frontend_fixtures import clean  # noqa: E402, F401 (autouse fixture)


def w_select(cache, k, pos: int):
    cache[:, :, pos] = k[:, :, 0]
    return k * 2


def w_slice(cache, k, pos: int):
    cache[:, :, pos : pos + 1] = k
    return cache[:, :, : pos + 1].sum(dim=2)


def w_copy_into_view(cache, k, pos: int):
    cache[:, :, pos : pos + 1].copy_(k)
    return k + 1


def w_index_copy(cache, k, pos: int):
    cache.index_copy_(2, torch.tensor([pos]), k)
    return cache.narrow(2, 0, pos + 1).mean()


def w_two_rows(cache, k, pos: int):
    cache[:, :, pos : pos + 1] = k
    cache[:, :, pos + 1 : pos + 2] = k * 2
    return k - 1


def w_old_read_after(cache, k, pos: int):
    old = cache[:, :, pos].clone()
    cache[:, :, pos : pos + 1] = k
    return old + cache.sum()


def w_shift(cache, k, pos: int):
    cache[:, :, 1 : pos + 1] = cache[:, :, 0:pos].clone()  # values read from the target itself
    return k * 1


FORMS: list[Callable[..., Any]] = [
    w_select,
    w_slice,
    w_copy_into_view,
    w_index_copy,
    w_two_rows,
    w_old_read_after,
    w_shift,
]


def cache_and_row(transposed: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    cache = torch.randn(1, 4, 16, 8, generator=g)
    if transposed:  # same shape, other strides: reshapes of it copy
        cache = torch.randn(1, 4, 8, 16, generator=g).transpose(2, 3)
    return cache, torch.randn(1, 4, 1, 8, generator=g)


@pytest.mark.parametrize("transposed", [False, True], ids=["contiguous", "transposed"])
@pytest.mark.parametrize("fn", FORMS, ids=lambda f: f.__name__)
def test_write_matches_eager(fn: Callable[..., Any], transposed: bool) -> None:
    compiled = xjit.jit(fn)
    cache_e, k = cache_and_row(transposed)
    cache_c = cache_e.clone() if not transposed else cache_and_row(True)[0]
    alias_e, alias_c = cache_e[0, 1], cache_c[0, 1]  # the caller's views, made before the calls
    for pos in (3, 3, 7):  # a hit, then another position (recompile or dynamic)
        want = fn(cache_e, k, pos)
        got = compiled(cache_c, k, pos)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(cache_c, cache_e, rtol=0, atol=0)
        torch.testing.assert_close(alias_c, alias_e, rtol=0, atol=0)


def _status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"{field} not in /proc/self/status")


@pytest.mark.parametrize("fn", [w_select, w_copy_into_view, w_index_copy], ids=lambda f: f.__name__)
def test_row_write_does_not_copy_a_64_mib_cache(fn: Callable[..., Any]) -> None:
    # Functionally, the new cache is a fresh 64 MiB tensor copied back into the caller's: the peak
    # would rise by 64-128 MiB per call. In place, the call writes 8 KiB.
    cache = torch.zeros(1, 32, 4096, 128)
    k = torch.randn(1, 32, 1, 128)
    compiled = xjit.jit(fn)
    compiled(cache, k, 5)  # compiles
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pytest.skip("cannot reset the peak RSS here")
    before = _status_mb("VmRSS")
    compiled(cache, k, 5)
    growth = _status_mb("VmHWM") - before
    assert growth < 16, f"peak RSS rose {growth:.1f} MB during one call"
    torch.testing.assert_close(cache[:, :, 5], k[:, :, 0], rtol=0, atol=0)
