"""Vector norms as native reductions (lower_fusion.cpp, red::Kind::Norm): torch.norm /
Tensor.norm, torch.linalg.vector_norm and F.normalize for p = 2, 1, inf, -inf, 0 and other
floats, over some dims or all, against PyTorch eager. Sums accumulate in f32 as eager's do: where
eager's f32 result itself overflows or rounds (a 2-norm of 1e20s is inf in eager), the value may
instead match the exact (f64) norm."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
xjit = pytest.importorskip("xjit")
F = torch.nn.functional


def _input() -> torch.Tensor:
    g = torch.Generator().manual_seed(5)
    x = torch.randn(37, 70, generator=g) * 3
    x[3, 5] = math.nan
    x[4, 7] = math.inf
    x[5] = 0.0  # F.normalize divides by eps
    x[6, ::3] = -2.0
    return x


CASES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "p2": lambda t: t.norm(dim=-1),
    "p1-keepdim": lambda t: t.norm(p=1, dim=-1, keepdim=True),
    "p2.5-dim0": lambda t: torch.norm(t, p=2.5, dim=0),
    "p3": lambda t: t.norm(p=3, dim=1),
    "all": lambda t: t.norm(),
    "vector-inf": lambda t: torch.linalg.vector_norm(t, math.inf, dim=-1),
    "vector-ninf": lambda t: torch.linalg.vector_norm(t, -math.inf, dim=0),
    "vector-0": lambda t: torch.linalg.vector_norm(t, 0, dim=-1, keepdim=True),
    "vector-2-dims": lambda t: torch.linalg.vector_norm(t.reshape(37, 7, 10), dim=(0, 2)),
    "normalize": lambda t: F.normalize(t, dim=-1),
    "normalize-p1-dim0": lambda t: F.normalize(t, p=1.0, dim=0, eps=1e-6),
}


@pytest.mark.filterwarnings("error::UserWarning")
@pytest.mark.parametrize("name", list(CASES))
def test_norm_matches_eager_and_runs_native(name: str, run_profiled: Any) -> None:
    fn = CASES[name]
    x = _input()
    got, report = run_profiled(lambda t: fn(t) * 1.0, x)
    want, exact = fn(x), fn(x.double()).float()
    ok = torch.isclose(got, want, rtol=2e-5, atol=1e-5, equal_nan=True) | torch.isclose(
        got, exact, rtol=2e-5, atol=1e-5, equal_nan=True
    )
    assert ok.all(), (got[~ok], want[~ok])
    assert "native" in report and "reference norm" not in report and "external" not in report, report
