"""A compiled graph's fused kernels hold only their contiguous (vectorized) loops; the general
strided version of a kernel is compiled by the first call with non-contiguous inputs
(docs/backend.md, "The general version on demand"). Results are checked against PyTorch for
contiguous, transposed and sliced inputs, and ``general_versions`` in ``xjit.ir.backend_stats()``
counts the general versions made."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
ir = pytest.importorskip("xjit.ir")

TEXT = """
graph @f(%x: f32[s0,24], %w: f32[24]) -> (f32[s0,24]) {
  %a = mul(%x, %w) : f32[s0,24]
  %b = tanh(%a) : f32[s0,24]
  %c = add(%b, %x) : f32[s0,24]
  return(%c)
}"""


def reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x * w) + x


def test_strided_inputs_compile_the_general_version_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XJIT_NO_CACHE", "1")  # count compiles, not cache links
    cg = ir.compile(ir.parse(TEXT))
    w = torch.randn(24)
    before = ir.backend_stats()["general_versions"]

    x = torch.randn(40, 24)
    (out,) = cg(x, w)
    torch.testing.assert_close(out, reference(x, w))
    assert ir.backend_stats()["general_versions"] == before  # contiguous: the fast loops

    xt = torch.randn(24, 40).t()  # transposed
    (out,) = cg(xt, w)
    torch.testing.assert_close(out, reference(xt, w))
    assert ir.backend_stats()["general_versions"] == before + 1

    xs = torch.randn(17, 48)[:, ::2]  # inner stride 2
    ws = torch.randn(48)[1::2]
    (out,) = cg(xs, ws)
    torch.testing.assert_close(out, reference(xs, ws))
    (out,) = cg(x, w)
    torch.testing.assert_close(out, reference(x, w))
    assert ir.backend_stats()["general_versions"] == before + 1  # compiled once


CHUNKS = """
graph @gates(%g: f32[8,64], %c: f32[8,16]) -> (f32[8,16], f32[8,16]) {
  %p:4 = chunk(%g) {chunks = 4, dim = 1} : f32[8,16], f32[8,16], f32[8,16], f32[8,16]
  %i = sigmoid(%p#0) : f32[8,16]
  %f = sigmoid(%p#1) : f32[8,16]
  %n = tanh(%p#2) : f32[8,16]
  %o = sigmoid(%p#3) : f32[8,16]
  %fc = mul(%f, %c) : f32[8,16]
  %in = mul(%i, %n) : f32[8,16]
  %cy = add(%fc, %in) : f32[8,16]
  %t = tanh(%cy) : f32[8,16]
  %hy = mul(%o, %t) : f32[8,16]
  return(%hy, %cy)
}"""


def test_chunks_of_rows_run_the_unit_stride_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """An LSTM step's gates, chunks of [B, 4H] rows (strided views), fused with the cell: the
    kernel's fast version is the one that needs only a unit inner stride, so no call runs the
    scalar general version."""
    monkeypatch.setenv("XJIT_NO_CACHE", "1")
    cg = ir.compile(ir.parse(CHUNKS))
    before = ir.backend_stats()["general_versions"]
    g, c = torch.randn(8, 64), torch.randn(8, 16)
    hy, cy = cg(g, c)
    i, f, n, o = g.chunk(4, 1)
    want_c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(n)
    torch.testing.assert_close(cy, want_c)
    torch.testing.assert_close(hy, torch.sigmoid(o) * torch.tanh(want_c))
    assert ir.backend_stats()["general_versions"] == before
