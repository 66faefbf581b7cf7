"""decompose-attention through xjit.ir.compile against PyTorch's scaled_dot_product_attention:
no mask, float and bool masks with fully masked rows, is_causal, and NaN propagation."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import xjit.ir as ir

GRAPH = """
graph @attn(%q: f32[2,3,5,4], %k: f32[2,3,6,4], %v: f32[2,3,6,8], %bm: bool[5,6],
            %fm: f32[2,1,5,6]) -> (f32[2,3,5,8], f32[2,3,5,8], f32[2,3,5,8], f32[2,3,5,8]) {
  %a = scaled_dot_product_attention(%q, %k, %v) : f32[2,3,5,8]
  %b = scaled_dot_product_attention(%q, %k, %v, %bm) : f32[2,3,5,8]
  %c = scaled_dot_product_attention(%q, %k, %v, %fm) {scale = 0.25} : f32[2,3,5,8]
  %d = scaled_dot_product_attention(%q, %k, %v) {is_causal = true} : f32[2,3,5,8]
  return(%a, %b, %c, %d)
}"""


def _inputs(nan: bool) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 3, 5, 4, generator=g), torch.randn(2, 3, 6, 4, generator=g)
    v = torch.randn(2, 3, 6, 8, generator=g)
    bm = torch.rand(5, 6, generator=g) > 0.4
    bm[2] = False  # a fully masked row: zeros, as torch's safe softmax
    fm = torch.randn(2, 1, 5, 6, generator=g)
    fm[1, 0, 3] = -math.inf
    if nan:
        q[0, 0, 1, 1] = math.nan
    return [q, k, v, bm, fm]


@pytest.mark.parametrize("nan", [False, True], ids=["finite", "nan"])
def test_decomposed_attention_matches_pytorch(nan: bool) -> None:
    q, k, v, bm, fm = ins = _inputs(nan)
    cg = ir.compile(ir.parse(GRAPH), pipeline="decompose-attention,fuse,plan-memory")
    got = cg.run(ins, framework="torch")
    want = [
        F.scaled_dot_product_attention(q, k, v),
        F.scaled_dot_product_attention(q, k, v, bm),
        F.scaled_dot_product_attention(q, k, v, fm, scale=0.25),
        F.scaled_dot_product_attention(q, k, v, is_causal=True),
    ]
    assert cg.stats["target_ops"] > 0  # 0 when the attentions stay reference kernels
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(torch.as_tensor(g), w, rtol=1e-5, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("nan", [False, True], ids=["finite", "nan"])
def test_reference_attention_matches_pytorch(nan: bool) -> None:
    """The reference kernel (no decomposition): a NaN query must give NaN rows, as in PyTorch."""
    q, k, v, bm, fm = ins = _inputs(nan)
    got = ir.run(ir.parse(GRAPH), [t.numpy() for t in ins])
    want = [
        F.scaled_dot_product_attention(q, k, v),
        F.scaled_dot_product_attention(q, k, v, bm),
        F.scaled_dot_product_attention(q, k, v, fm, scale=0.25),
        F.scaled_dot_product_attention(q, k, v, is_causal=True),
    ]
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(torch.as_tensor(g), w, rtol=1e-5, atol=1e-6, equal_nan=True)



def _tril_mask_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    # transformers' causal mask: a bool tensor the frontend folds into a constant.
    mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _row_masked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
    mask[2] = False  # a fully masked row: zeros
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("bad", ["finite", "nan-q", "inf-v"])
@pytest.mark.parametrize("fn", [_tril_mask_attention, _row_masked_attention], ids=["tril", "row-masked"])
def test_constant_bool_mask_matches_pytorch(fn: object, bad: str, tmp_path: object) -> None:
    """A constant mask is negated at compile time; with the causal triangle the
    probabilities-by-v product skips the masked blocks (causal-products), and the safe softmax's
    fully masked row and non-finite inputs still give PyTorch's values."""
    import xjit
    import xjit._frontend as fe
    from xjit.jit import config

    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 70, 16, generator=g) for _ in range(3))
    if bad == "nan-q":
        q[0, 1, 40, 3] = math.nan
    if bad == "inf-v":
        v[0, 0, 65, 1] = math.inf  # in a skipped block: 0 * Inf is NaN in eager too
    fe.reset()  # compile again (with the dump) for each case
    config.dump_dir = str(tmp_path)
    try:
        got = xjit.jit(fn)(q, k, v)
    finally:
        config.dump_dir = ""
    want = fn(q, k, v)  # type: ignore[operator]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)
    (runtime_ir,) = [p.read_text() for p in tmp_path.glob("*.runtime.xir")]  # type: ignore[attr-defined]
    assert "logical_not" not in runtime_ir
    assert ('causal = "lhs_lower"' in runtime_ir) == (fn is _tril_mask_attention)
