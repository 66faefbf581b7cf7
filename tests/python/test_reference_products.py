"""XJIT_REFERENCE_PRODUCTS (docs/backend.md "Accuracy"), the precision experiment that found
where Mixtral's router gradient error comes from (docs/perf.md "Session 20"): with it set, the
products it names run their reference kernels (f64 accumulation, one rounding: the
interpreter's values bit for bit) instead of oneDNN's f32 chains, which differ from them; read at
each compile, so it switches within a process."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("xjit._xjit")
import xjit.ir as ir  # noqa: E402

# K = 512: oneDNN's one f32 chain per output rounds differently from the f64 reference.
T, K, N, E = 48, 512, 40, 3
GRAPH = f"""
graph @f(%x: f32[{T},{K}], %w: f32[{N},{K}], %b: f32[{N}], %we: f32[{E},{K},{N}], %offs: i32[{E}]) -> (f32[{T},{N}], f32[{T},{N}]) {{
  %y = linear(%x, %w, %b) : f32[{T},{N}]
  %r = relu(%y) : f32[{T},{N}]
  %g = grouped_mm(%x, %we, %offs) : f32[{T},{N}]
  return(%r, %g)
}}"""


def _inputs() -> list[Any]:
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(T, K, generator=gen), torch.randn(N, K, generator=gen), torch.randn(N, generator=gen),
            torch.randn(E, K, N, generator=gen), torch.tensor([10, 10, 40], dtype=torch.int32)]


@pytest.mark.parametrize("which", ["0", "1", "matmul", "grouped"])
def test_named_products_run_the_reference_kernel(which: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XJIT_REFERENCE_PRODUCTS", which)
    inputs = _inputs()
    graph = ir.parse(GRAPH)
    want = ir.run(graph, inputs)
    compiled = ir.compile(graph)
    got = compiled(*inputs)
    as_reference = {"0": (False, False), "1": (True, True), "matmul": (True, False), "grouped": (False, True)}[which]
    for g, w, reference in zip(got, want, as_reference, strict=True):
        assert torch.allclose(g, w, rtol=1e-5, atol=1e-5 * float(w.abs().max()))
        assert torch.equal(g, w) == reference, (which, (g - w).abs().max())
    # The products the switch names are reference ops; the others oneDNN's.
    assert compiled.stats["reference_ops"] >= sum(as_reference), compiled.stats
