"""Graph inputs laid out with unit stride in another dim than the last (a transposed matrix, a
channels_last image, a permuted 3-D tensor): the frontend marks the graph input with that dim
(`{unit_dim = d}`, driver.cpp hintInputUnitDims) and the native kernels reading it get a fast
version laid out for it (lower_fusion.cpp expectedUnitDim), instead of running their general
(scalar) version: a column sum of a transposed [1024, 768] input took 1.1 ms against eager's
0.025. Values are checked against eager, ``general_versions`` in ``xjit.ir.backend_stats()``
must not grow, and a later call with another layout recompiles (the layout class is guarded)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import xjit
import xjit._frontend as fe
import xjit.ir as ir


pytestmark = pytest.mark.usefixtures("fresh_frontend")  # (conftest.py)


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XJIT_NO_CACHE", "1")  # count compiles, not cache links


def transposed(*shape: int) -> Callable[[torch.Generator], torch.Tensor]:
    return lambda g: torch.randn(*reversed(shape), generator=g).t()


def channels_last(*shape: int) -> Callable[[torch.Generator], torch.Tensor]:
    return lambda g: torch.randn(*shape, generator=g).contiguous(memory_format=torch.channels_last)


def permuted(*shape: int) -> Callable[[torch.Generator], torch.Tensor]:
    # [a, b, c] viewing a contiguous [c, a, b]: unit stride in dim 1
    return lambda g: torch.randn(shape[2], shape[0], shape[1], generator=g).permute(1, 2, 0)


CASES: list[tuple[str, Callable[..., Any], Callable[[torch.Generator], torch.Tensor]]] = [
    ("column_sum", lambda x: x.sum(0), transposed(1024, 768)),
    ("column_sum_tail", lambda x: x.sum(0), transposed(37, 70)),
    ("row_sum", lambda x: x.sum(1), transposed(300, 77)),
    ("amax_rows", lambda x: x.amax(-1), transposed(64, 129)),
    ("mean_hw", lambda x: x.mean((2, 3)), channels_last(4, 48, 14, 14)),
    ("mean_c", lambda x: x.mean(1), channels_last(2, 40, 9, 11)),
    ("layer_norm", lambda x: F.layer_norm(x, x.shape[-1:]), transposed(256, 200)),
    ("softmax", lambda x: torch.softmax(x, -1), transposed(128, 96)),
    ("log_softmax_dim0", lambda x: torch.log_softmax(x, 0), transposed(70, 33)),
    ("scaled", lambda x: x * 2 + 1, transposed(130, 67)),
    ("gelu_plus_contiguous", lambda x: F.gelu(x) + x.contiguous(), channels_last(2, 24, 13, 7)),
    ("relu_sum_last", lambda x: torch.relu(x).sum(-1), permuted(6, 50, 40)),
    ("var_dim1", lambda x: x.var(1), permuted(5, 33, 60)),
]


@pytest.mark.parametrize("name,fn,make", CASES, ids=[c[0] for c in CASES])
def test_inputs_laid_out_otherwise_run_the_fast_version(
    name: str, fn: Callable[..., Any], make: Callable[[torch.Generator], torch.Tensor]
) -> None:
    g = torch.Generator().manual_seed(len(name))
    x = make(g)
    assert x.stride()[-1] != 1  # the layout under test
    before = ir.backend_stats()["general_versions"]
    with torch.no_grad():
        got = xjit.jit(fn)(x)
        want = fn(x)
    # atol 1e-4: sums of up to 1024 unit-normal terms round off by ~2e-5 in f32, eager's too.
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)
    assert got.stride() == want.stride()
    assert ir.backend_stats()["general_versions"] == before


def test_another_layout_recompiles_for_its_own_unit_dim() -> None:
    fe.set_recording(True)
    f = xjit.jit(lambda x: torch.exp(x).sum(0))
    xt = torch.randn(90, 300).t()
    xc = xt.contiguous()
    before = ir.backend_stats()["general_versions"]
    with torch.no_grad():
        for x in (xt, xc, xt, xc):
            torch.testing.assert_close(f(x), torch.exp(x).sum(0), rtol=1e-5, atol=1e-5)
    assert ir.backend_stats()["general_versions"] == before
    ev = fe.events()
    assert len(ev["graphs"]) == 2 and len(ev["recompiles"]) == 1  # one graph per layout class
    assert "{unit_dim = 0}" in ev["graphs"][0]["ir"] and "{unit_dim" not in ev["graphs"][1]["ir"]


def test_the_hint_is_in_the_graph_the_backend_compiles(tmp_path: Any) -> None:
    xjit.config.dump_dir = str(tmp_path)
    try:
        with torch.no_grad():
            xjit.jit(lambda x: x.sum(0))(torch.randn(16, 24).t())
    finally:
        xjit.config.dump_dir = ""
    (runtime,) = tmp_path.glob("*.runtime.xir")
    assert "f32[24,16] {unit_dim = 0}" in runtime.read_text()
    assert ir.verify(ir.parse(runtime.read_text())) == []


def test_training_step_with_a_transposed_input() -> None:
    # The training forward and backward graphs keep the captured graph's hints (autodiff.cpp):
    # values and the weight's gradient as eager's.
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x * w, (96,)).sum(0)

    xt = torch.randn(96, 200, generator=torch.Generator().manual_seed(5)).t()
    w1 = torch.linspace(0.5, 1.5, 96).requires_grad_()
    w2 = w1.detach().clone().requires_grad_()
    got, want = xjit.jit(fn)(xt, w1), fn(xt, w2)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    got.square().sum().backward()
    want.square().sum().backward()
    torch.testing.assert_close(w1.grad, w2.grad, rtol=1e-4, atol=1e-4)
