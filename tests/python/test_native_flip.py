"""flip as an index remap in native kernels (lower_fusion.cpp: index n - 1 - i of each flipped
dim), alone and fused with elementwise producers and consumers, against eager: dims, dtypes,
strided inputs. It was the reference kernel's element-by-element copy; the autodiff pass's
rules (flip, reflect padding) emit it."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")


@pytest.mark.filterwarnings("error::UserWarning")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bool], ids=str)
@pytest.mark.parametrize("dims", [(0,), (-1,), (0, 2), (1, 2, 0)], ids=str)
def test_flip_is_native_and_exact(dims: tuple[int, ...], dtype: torch.dtype, run_profiled: Any) -> None:
    g = torch.Generator().manual_seed(5)
    x = (torch.randn(3, 5, 70, generator=g) * 5).to(dtype)
    got, report = run_profiled(lambda t: torch.flip(t, dims), x)
    assert torch.equal(got, torch.flip(x, dims))
    assert "reference flip" not in report, report


@pytest.mark.parametrize("view", ["transposed", "sliced"])
def test_flip_of_strided_views_fused(view: str, run_profiled: Any) -> None:
    x = torch.randn(40, 64)

    def fn(t: torch.Tensor) -> torch.Tensor:
        v = t.t() if view == "transposed" else t[:, ::2]
        return torch.flip(torch.exp(v) * 2.0, (0, 1)) + 1.0

    got, report = run_profiled(fn, x)
    torch.testing.assert_close(got, fn(x))
    assert "reference flip" not in report, report
