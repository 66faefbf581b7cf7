"""Reductions over dims (and layer_norm, softmax, log_softmax) in the static layout rules (src/frontend/output_layout.cpp, docs/
frontend.md *Output layouts*): ATen makes their results contiguous whatever the operand's layout,
so a graph reducing a permuted, channels-last, strided or expanded tensor must return eager's
exact strides and values without PyTorch's meta kernels (`layout_meta_walks`), whose first use
imports torch._dynamo (over a second)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
fe = pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from frontend_fixtures import check_without_meta_walk, clean, counters  # noqa: E402, F401 (autouse fixture)

# (input, a view the graph takes of it): strided and expanded values arise inside graphs (an
# input that is not dense but for its size-1 dims sends the capture to the meta walk anyway).
LAYOUTS: dict[str, tuple[Callable[[], torch.Tensor], Callable[[torch.Tensor], torch.Tensor]]] = {
    "permuted": (lambda: torch.randn(4, 5, 6).permute(2, 0, 1), lambda t: t),
    "transposed": (lambda: torch.randn(5, 7).t(), lambda t: t),
    "channels_last": (lambda: torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last), lambda t: t),
    "size_one_dims": (lambda: torch.randn(3, 1, 5).transpose(0, 2), lambda t: t),
    "step_slice": (lambda: torch.randn(4, 10, 6), lambda t: t[:, ::2].transpose(0, 2)),
    "expanded": (lambda: torch.randn(4, 1, 6), lambda t: t.expand(4, 5, 6)),
    "permuted_product": (lambda: torch.randn(3, 4, 5), lambda t: (t @ t.transpose(1, 2)).permute(1, 2, 0)),
}

REDUCTIONS: dict[str, Callable[[Any, list[int], bool], Any]] = {
    "sum": lambda x, d, k: x.sum(d, keepdim=k),
    "mean": lambda x, d, k: x.mean(d, keepdim=k),
    "amax": lambda x, d, k: x.amax(d, keepdim=k),
    "amin": lambda x, d, k: x.amin(d, keepdim=k),
    "prod": lambda x, d, k: x.prod(d[0], keepdim=k),
    "var": lambda x, d, k: x.var(d, keepdim=k),
    "std_mean": lambda x, d, k: torch.std_mean(x, d, keepdim=k),
    "norm": lambda x, d, k: torch.linalg.vector_norm(x, dim=d, keepdim=k),
    "logsumexp": lambda x, d, k: torch.logsumexp(x, d, keepdim=k),
    "any": lambda x, d, k: x.any(d[0], keepdim=k),
    "argmax": lambda x, d, k: x.argmax(d[0], keepdim=k),
    "max_dim": lambda x, d, k: x.max(d[0], keepdim=k),
    "count_nonzero": lambda x, d, k: torch.count_nonzero(x, d),
    "sum_then_mul": lambda x, d, k: x.sum(d, keepdim=k) * 2,
    # not reductions, but their CPU kernels allocate contiguous results as well
    "layer_norm": lambda x, d, k: torch.nn.functional.layer_norm(x, x.shape[-len(d) :]),
    "softmax": lambda x, d, k: torch.softmax(x, d[0]),
    "log_softmax": lambda x, d, k: torch.log_softmax(x, d[-1]) + 1,
}


def dims_of(rank: int) -> list[list[int]]:
    """One dim, the last two, and all but the first."""
    return [[0], [rank - 1], list(range(rank - 2, rank)), list(range(1, rank))]


@pytest.mark.parametrize("layout,name", list(itertools.product(LAYOUTS, REDUCTIONS)))
def test_reduction_results_are_contiguous(layout: str, name: str) -> None:
    make, view = LAYOUTS[layout]
    x = make()
    rank = view(x).dim()
    for dims, keepdim in itertools.product(dims_of(rank), [False, True]):
        fn = REDUCTIONS[name]

        def f(t: torch.Tensor, fn: Any = fn, dims: list[int] = dims, keepdim: bool = keepdim) -> Any:
            # (bool operands compared before the view: the rules stop at an elementwise op of a
            # step slice, whose exact strides they do not follow)
            if name not in ("any", "count_nonzero"):
                return fn(view(t), dims, keepdim)
            return fn(view(t > 0) if layout == "step_slice" else view(t) > 0, dims, keepdim)

        want, got = f(x), xjit.jit(f)(x)
        where = f"{name} over {dims}, keepdim {keepdim}, of a {layout} {tuple(view(x).shape)} {view(x).stride()}"
        check_without_meta_walk(tuple(got) if isinstance(got, tuple) else got, want, where)


def test_reduction_of_a_reshaped_transpose() -> None:
    # `(x * 2).transpose(1, 2).reshape(-1, n).sum(0)` over a batch of one: the rules stopped at
    # the sum of a permuted view, and the first call imported torch._dynamo for the meta walk.
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = (x * 2).transpose(1, 2)
        return y.reshape(-1, 8).sum(0), y.contiguous().view(-1)

    x = torch.randn(1, 8, 64)
    got, want = xjit.jit(f)(x), f(x)
    for g, w in zip(got, want, strict=True):
        assert g.stride() == w.stride()
        torch.testing.assert_close(g, w)
    assert counters()["layout_meta_walks"] == 0
