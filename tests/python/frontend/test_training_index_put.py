"""Training steps that write into a tensor by index (`out[:, t] = ...`, `buf[idx] = v`): the
frontend captures such writes as `index_put`, whose derivative rule (autodiff_rules_movement.cpp)
lets the step train compiled. Gradients and outputs must be eager's (until session 22 these
steps ran in Python: RWKV's WKV loop)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from frontend_fixtures import clean, fe  # noqa: E402, F401 (autouse fixture)


def _wkv_loop(k: Any, v: Any, decay: Any, first: Any) -> Any:
    # transformers' rwkv_linear_attention_cpu, shortened: a running state, each step written
    # into out[:, t].
    out = torch.zeros_like(k)
    num = torch.zeros_like(k[:, 0])
    den = torch.zeros_like(k[:, 0])
    mx = torch.zeros_like(k[:, 0]) - 1e38
    w = -torch.exp(decay)
    for t in range(k.shape[1]):
        kt, vt = k[:, t], v[:, t]
        m = torch.maximum(mx, kt + first)
        e1, e2 = torch.exp(mx - m), torch.exp(kt + first - m)
        out[:, t] = (e1 * num + e2 * vt) / (e1 * den + e2)
        m2 = torch.maximum(mx + w, kt)
        e1, e2 = torch.exp(mx + w - m2), torch.exp(kt - m2)
        num, den, mx = e1 * num + e2 * vt, e1 * den + e2, m2
    return (out * out).sum(), out


def _rows_by_tensor(x: Any, w: Any, idx: Any) -> Any:
    buf = torch.zeros(6, 4)
    buf[idx] = torch.tanh(x @ w)  # rows written by an index tensor
    return (buf * torch.arange(4.0)).sum(), buf


def _overwrite_a_computed_tensor(x: Any, w: Any, idx: Any) -> Any:
    h = x @ w + 1  # [3, 4], requires grad (nothing saves it: eager allows the write)
    h[1:, 2] = x[1:, 0] * 2  # its overwritten part gets no gradient, the values do
    return (h * h).sum(), h


def _index_copy(x: Any, w: Any, idx: Any) -> Any:
    h = x @ w
    out = torch.ones(6, 4).index_copy(0, idx, h * 3)
    return out.pow(2).sum(), out


def _mask_writes(x: Any, w: Any, idx: Any) -> Any:
    h = x @ w
    h[h > 0.5] = 0.5  # a bool mask and a scalar: masked_fill
    h[h < -0.5] = x.sum() * 0  # and a 0-d tensor: where
    return h.sum(), h


def _check(fn: Callable[..., Any], *inputs: Any, grad_tol: float = 1e-5) -> None:
    xs = [t.clone().requires_grad_(t.is_floating_point()) for t in inputs]
    ys = [t.clone().requires_grad_(t.is_floating_point()) for t in inputs]
    got, want = xjit.jit(fn)(*xs), fn(*ys)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
        assert g.requires_grad == w.requires_grad
    got[0].backward()
    want[0].backward()
    for a, b in zip(xs, ys, strict=True):
        if a.is_floating_point():
            torch.testing.assert_close(a.grad, b.grad, rtol=grad_tol, atol=1e-6)
    graphs = fe.events()["graphs"]
    assert len(graphs) == 1, graphs
    assert not graphs[0]["runs_in_python"], graphs[0]["note"]
    assert graphs[0]["note"].startswith("training step"), graphs[0]["note"]


def test_a_loop_writing_each_step_into_a_buffer_trains_compiled() -> None:
    torch.manual_seed(0)
    _check(_wkv_loop, torch.randn(2, 5, 8), torch.randn(2, 5, 8), torch.randn(8), torch.randn(8))


@pytest.mark.parametrize(
    "fn",
    [_rows_by_tensor, _overwrite_a_computed_tensor, _index_copy, _mask_writes],
    ids=["rows_by_tensor", "overwrite_computed", "index_copy", "mask_writes"],
)
def test_index_writes_train_with_eagers_gradients(fn: Callable[..., Any]) -> None:
    torch.manual_seed(1)
    _check(fn, torch.randn(3, 5), torch.randn(5, 4), torch.tensor([4, 0, 2]))
