"""F.scaled_dot_product_attention with dropout_p > 0 (what Hugging Face models pass in train()
mode) under xjit.jit: the op takes the attention weights' dropout noise as an operand, drawn by
PyTorch as eager's CPU math path draws it (at::dropout of the softmax weights), so under the same
seed the result and the q/k/v gradients are eager's, the step trains compiled, and the generator
ends where eager's ends. Also without gradients, on the native, reference (f64: not decomposed),
eager and interp backends."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from frontend_fixtures import clean, fe  # noqa: E402, F401 (autouse fixture)

F = torch.nn.functional
P = 0.3


def attention(q: Any, k: Any, v: Any, mask: Any = None, causal: bool = False, gqa: bool = False) -> Any:
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=P, is_causal=causal, enable_gqa=gqa)
    return out * 2.0


def inputs(kind: str, dtype: Any = torch.float32) -> tuple[list[Any], dict[str, Any]]:
    """q, k, v (and a mask) of one attention form, and the keyword arguments that select it."""
    g = torch.Generator().manual_seed(7)
    heads_kv = 2 if kind == "gqa" else 4
    q = torch.randn(2, 4, 6, 8, generator=g, dtype=dtype)
    k = torch.randn(2, heads_kv, 9, 8, generator=g, dtype=dtype)
    v = torch.randn(2, heads_kv, 9, 5, generator=g, dtype=dtype)
    if kind == "float_mask":
        return [q, k, v, torch.randn(1, 1, 6, 9, generator=g, dtype=dtype)], {}
    if kind == "bool_mask":  # row 0 fully masked: zeros, as eager's safe softmax
        mask = torch.randn(6, 9, generator=g) > -0.5
        mask[0] = False
        return [q, k, v, mask], {}
    return [q, k, v], {"causal": kind == "causal", "gqa": kind in ("gqa", "gqa_same_heads")}


def assert_noise_matters(out: Any, args: list[Any], kw: dict[str, Any]) -> None:
    """The result differs from attention without dropout: the test sees the noise."""
    q, k, v, *mask = (t.detach() for t in args)
    plain = F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask[0] if mask else None, is_causal=kw.get("causal", False), enable_gqa=kw.get("gqa", False)
    )
    assert (out.detach() - 2.0 * plain).abs().max() > 0.1


KINDS = ["plain", "causal", "float_mask", "bool_mask", "gqa_same_heads", "gqa"]


@pytest.mark.parametrize("kind", KINDS)
def test_attention_dropout_trains_like_eager(kind: str) -> None:
    args, kw = inputs(kind)
    grad_out = torch.randn(2, 4, 6, 5)
    compiled = xjit.jit(attention)
    results = []
    for fn in (attention, compiled):
        leaves = [t.clone().requires_grad_() for t in args[:3]]
        torch.manual_seed(11)
        out = fn(*leaves, *args[3:], **kw)
        grads = torch.autograd.grad(out, leaves, grad_out)
        results.append((out, grads, torch.rand(3)))  # the generator after the step
    (want, want_grads, want_next), (got, got_grads, got_next) = results
    assert_noise_matters(want, args, kw)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for name, a, b in zip("qkv", got_grads, want_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=lambda m, n=name: f"d{n}: {m}")
    assert torch.equal(got_next, want_next)
    graphs = fe.events()["graphs"]
    assert len(graphs) == 1, graphs
    # enable_gqa with fewer key/value heads is not decomposed, and has no derivative rule.
    assert graphs[0]["runs_in_python"] == (kind == "gqa"), graphs[0]["note"]
    if kind != "gqa":
        assert graphs[0]["note"].startswith("training step: forward"), graphs[0]["note"]


@pytest.mark.parametrize("backend", ["xjit", "eager", "interp"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("kind", ["causal", "bool_mask", "gqa"])
def test_attention_dropout_without_grad_matches_eager(kind: str, dtype: Any, backend: str) -> None:
    # f64 (and gqa) keep the op whole: the reference kernel multiplies the weights by the noise.
    args, kw = inputs(kind, dtype)
    compiled = xjit.jit(attention, backend=backend)
    with torch.no_grad():
        torch.manual_seed(3)
        want = attention(*args, **kw)
        torch.manual_seed(3)
        got = compiled(*args, **kw)
    assert_noise_matters(want, args, kw)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    graphs = fe.events()["graphs"]
    assert len(graphs) == 1 and not graphs[0]["runs_in_python"], graphs[0]["note"]


def block(x: Any, w: Any) -> Any:
    """An attention block's dropouts: on the weights (dropout_p) and on the output."""
    b, length, _ = x.shape  # as Hugging Face's attention reshapes its heads
    q = (x @ w).view(b, length, 2, 4).transpose(1, 2)
    out = F.scaled_dot_product_attention(q, q, q, dropout_p=P, is_causal=True)
    return F.dropout(out.transpose(1, 2).reshape(b, length, 8), 0.2, True)


@pytest.mark.parametrize("dynamic", [None, True], ids=["automatic", "dynamic"])
def test_dropout_noise_follows_a_symbolic_length(dynamic: Any) -> None:
    # The sequence length changes between steps: the capture with it symbolic draws noise of
    # the length of each call (it was a graph break per dropout). Whether that step trains
    # compiled is up to the derivative rules (a symbolic view, causal attention with a
    # symbolic length: not yet); the values are eager's either way.
    w = torch.randn(8, 8)
    compiled = xjit.jit(block, dynamic=dynamic)
    for step, length in enumerate((6, 9, 7, 12)):
        x = torch.randn(2, length, 8)
        results = []
        for fn in (block, compiled):
            wc = w.clone().requires_grad_()
            torch.manual_seed(step)
            out = fn(x, wc)
            out.square().sum().backward()
            results.append((out, wc.grad, torch.rand(3)))
        (want, want_grad, want_next), (got, got_grad, got_next) = results
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        scale = want_grad.abs().max().item()
        torch.testing.assert_close(got_grad, want_grad, rtol=1e-5, atol=1e-5 * scale)
        assert torch.equal(got_next, want_next), length
    events = fe.events()
    assert not events["breaks"], events["breaks"]
    graphs = events["graphs"]
    assert 1 <= len(graphs) <= 2, graphs  # (automatic: the static first capture, then one)
