"""Mixture-of-experts dispatch without PyTorch fallbacks (docs/backend.md "Grouped products"):
torch.histc as the `histc` op (ATen's binning in the input's own type, the max edge in the last
bin, NaN and out-of-range values dropped, min == max taking the data's range) and transformers'
`grouped_mm_fallback` custom op as `grouped_mm` (oneDNN sgemm per group in f32, the reference
kernel in f64), forward and gradients (the autodiff rule's grouped_mm / grouped_mm_weight),
against eager: empty groups, one group, uneven groups, rows after the last group, a transposed
weight view."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("xjit._xjit")
moe = pytest.importorskip("transformers.integrations.moe")
import xjit  # noqa: E402


def _native(report: str, op: str) -> None:
    assert f"native {op}" in report or f"reference {op}" in report, report
    assert "external" not in report, report


# ---- histc ----

HISTC_CASES = {
    # The router's form: integer-valued expert ids, min 0, max E - 1 (the last id is the max edge).
    "expert_ids": (torch.tensor([0.0, 3, 1, 3, 2, 0, 3, 1]), dict(bins=4, min=0, max=3)),
    "floats_in_range": (None, dict(bins=7, min=-1.5, max=2.0)),
    "edges_and_outside": (torch.tensor([-1.0, -0.5, 0.0, 0.25, 0.5, 1.0, 1.5, float("nan")]),
                          dict(bins=4, min=0, max=1)),
    "data_range": (None, dict(bins=10)),  # min == max == 0: the data's extrema
    "constant_data": (torch.full((5,), 2.0), dict(bins=3)),  # widened to [1, 3]
    "one_bin": (None, dict(bins=1, min=-1, max=1)),
    "ulp_near_edges": (torch.tensor([0.1, 0.2, 0.3, 0.7, 0.9, 1 / 3, 2 / 3]), dict(bins=3, min=0, max=1)),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("case", sorted(HISTC_CASES))
def test_histc_equals_eager(case: str, dtype: torch.dtype, run_profiled: Any) -> None:
    x, kw = HISTC_CASES[case]
    if x is None:
        x = torch.randn(500, generator=torch.Generator().manual_seed(0)) * 2
    x = x.to(dtype)
    got, report = run_profiled(lambda t: torch.histc(t, **kw), x)
    want = torch.histc(x, **kw)
    assert got.dtype == want.dtype and torch.equal(got, want), (got, want)
    _native(report, "histc")


def test_histc_method_and_no_gradient(run_profiled: Any) -> None:
    x = torch.randn(64, requires_grad=True)

    def fn(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = t.histc(bins=5, min=-2, max=2)
        return h, (t * 2).sum()

    (h, s), report = run_profiled(fn, x)
    assert torch.equal(h, torch.histc(x.detach(), bins=5, min=-2, max=2))
    assert not h.requires_grad  # as in eager
    s.backward()
    assert torch.equal(x.grad, torch.full_like(x, 2.0))


def test_histc_of_integers_stays_a_fallback() -> None:
    # eager's CPU histc takes no integer input: the call stays PyTorch's, and raises as it does.
    with pytest.raises(RuntimeError, match="histogram_cpu"):
        xjit.jit(lambda t: torch.histc(t, bins=3))(torch.arange(6))


# ---- grouped_mm ----

T, K, N, E = 11, 6, 5, 4
OFFSETS = {
    "uneven": [2, 7, 7, 11],  # one empty group in the middle
    "leading_empty": [0, 0, 5, 11],
    "one_group": [0, 11, 11, 11],
    "trailing_rows": [3, 4, 6, 8],  # rows 8..10 in no group: zeros, no gradient
    "all_empty": [0, 0, 0, 0],
}


def _grouped(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    return torch.ops.transformers.grouped_mm_fallback(x, w, offs=offs)


def _operands(dtype: torch.dtype, transposed: bool, offsets: list[int]) -> tuple[Any, ...]:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(T, K, generator=g, dtype=dtype)
    # transformers passes gate_up_proj.transpose(-2, -1) when the weights are stored [E, N, K].
    w = torch.randn(E, N, K, generator=g, dtype=dtype).transpose(1, 2) if transposed else torch.randn(
        E, K, N, generator=g, dtype=dtype)
    return x, w, torch.tensor(offsets, dtype=torch.int32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("transposed", [False, True], ids=["plain", "transposed"])
@pytest.mark.parametrize("case", sorted(OFFSETS))
def test_grouped_mm_forward_equals_eager(case: str, transposed: bool, dtype: torch.dtype,
                                         run_profiled: Any) -> None:
    x, w, offs = _operands(dtype, transposed, OFFSETS[case])
    got, report = run_profiled(lambda a, b, o: _grouped(a, b, o) * 1.0, x, w, offs)
    torch.testing.assert_close(got, _grouped(x, w, offs), rtol=1e-5, atol=1e-5)
    _native(report, "grouped_mm")
    if dtype == torch.float32:
        assert "native grouped_mm" in report, report  # oneDNN sgemm per group


def test_grouped_mm_offsets_change_between_calls() -> None:
    # The boundaries are data: one compiled graph serves every split of the rows.
    f = xjit.jit(lambda a, b, o: _grouped(a, b, o) + 1)
    x, w, _ = _operands(torch.float32, True, OFFSETS["uneven"])
    for offsets in OFFSETS.values():
        offs = torch.tensor(offsets, dtype=torch.int32)
        torch.testing.assert_close(f(x, w, offs), _grouped(x, w, offs) + 1, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("case", sorted(OFFSETS))
def test_grouped_mm_gradients_equal_eager(case: str, dtype: torch.dtype) -> None:
    x, w, offs = _operands(dtype, True, OFFSETS[case])
    r = torch.randn(T, N, generator=torch.Generator().manual_seed(2), dtype=dtype)

    def step(fn: Any) -> tuple[torch.Tensor, ...]:
        xa, wb = x.clone().requires_grad_(), w.detach().clone().requires_grad_()
        y = fn(xa, wb.transpose(1, 2).transpose(1, 2), offs)
        (y * r).sum().backward()
        return y.detach(), xa.grad, wb.grad

    def f(a: torch.Tensor, b: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        return torch.relu(_grouped(a, b, o)) * 1.5

    want = step(f)
    reports: list[Any] = []

    def explained(a: torch.Tensor, b: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        reports.append(xjit.explain(xjit.jit(f))(a, b, o))
        return reports[-1].output

    got = step(explained)
    assert reports[0].graph_count == 1 and not reports[0].graphs[0].runs_in_python, str(reports[0])
    assert reports[0].graphs[0].note.startswith("training step"), reports[0].graphs[0].note
    for g_, w_ in zip(got, want, strict=True):
        torch.testing.assert_close(g_, w_, rtol=1e-5, atol=1e-5)


def test_grouped_mm_decreasing_offsets_run_in_python() -> None:
    # The op takes non-decreasing offsets within [0, T]; transformers' loop takes any (a
    # decreasing end multiplies nothing and moves its start back): such a call runs in Python,
    # with one warning, and gives eager's result.
    x, w, _ = _operands(torch.float32, False, OFFSETS["uneven"])
    offs = torch.tensor([5, 3, 9, 11], dtype=torch.int32)
    with pytest.warns(xjit.XjitWarning, match="offsets must be non-decreasing"):
        got = xjit.jit(lambda a, b, o: _grouped(a, b, o) * 2)(x, w, offs)
    torch.testing.assert_close(got, _grouped(x, w, offs) * 2)


@pytest.mark.parametrize("backend", ["eager", "interp"])
def test_grouped_ops_on_the_other_backends(backend: str) -> None:
    # backend="eager" runs the IR ops through python/xjit/_eager.py's rows (a loop over the groups),
    # "interp" through the reference kernels; the training step's backward graph too.
    x, w, offs = _operands(torch.float32, True, OFFSETS["trailing_rows"])
    ids = torch.tensor([0.0, 3, 1, 3, 2, 0])

    def f(a: torch.Tensor, b: torch.Tensor, o: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        return _grouped(a, b, o).sum(0) + torch.histc(i, bins=5, min=0, max=4)[:1]

    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    want = f(xa, w, offs, ids)
    got = xjit.jit(f, backend=backend)(xb, w, offs, ids)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    want.sum().backward()
    got.sum().backward()
    torch.testing.assert_close(xb.grad, xa.grad, rtol=1e-5, atol=1e-5)
