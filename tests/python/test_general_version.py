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
