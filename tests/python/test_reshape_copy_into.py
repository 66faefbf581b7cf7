"""A lone reshape/flatten/contiguous of a strided view of a planned value (attention's output,
[B,H,S,D] transposed to [B,S,H,D] and merged to [B,S,H*D]) copies into the arena slice that
plan-memory gave it (the runtime's CopyInto) instead of a fresh buffer per call (where the
operand's strides allow a view it stays one: test_plan_memory_views.py). Values are compared with eager PyTorch and the reference
interpreter (which runs no memory plan), over several calls of one compiled graph (the arena is
reused from call to call)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
ir = pytest.importorskip("xjit.ir")

# The copy %r is read by %y after %z, which is as large as %r and computed after it: a slice
# shared with %z would corrupt %y.
ATTENTION_OUTPUT = """
graph @f(%p: f32[1,6,20,20], %v: f32[1,6,20,8], %w: f32[48,48]) -> (f32[1,20,48]) {
  %x = matmul(%p, %v) : f32[1,6,20,8]
  %t = transpose(%x) {dim0 = 1, dim1 = 2} : f32[1,20,6,8]
  %r = reshape(%t) {shape = [1, 20, 48]} : f32[1,20,48]
  %z = sin(%r) : f32[1,20,48]
  %y = linear(%r, %w) : f32[1,20,48]
  %o = add(%y, %z) : f32[1,20,48]
  return(%o)
}"""


def attention_output(p: torch.Tensor, v: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    r = (p @ v).transpose(1, 2).reshape(1, 20, 48)
    return torch.nn.functional.linear(r, w) + torch.sin(r)


def test_reshape_of_transposed_result_copies_into_its_slice() -> None:
    g = ir.parse(ATTENTION_OUTPUT)
    compiled = ir.compile(g)
    assert compiled.stats["planned_copies"] == 1
    torch.manual_seed(0)
    for _ in range(3):
        p, v, w = torch.randn(1, 6, 20, 20), torch.randn(1, 6, 20, 8), torch.randn(48, 48)
        (out,) = compiled.run([p, v, w])
        (ref,) = ir.run(g, [p, v, w])
        want = attention_output(p, v, w)
        tol = 1e-5 * want.abs().max().item()  # f32 sums over 20 and 48 terms, in other orders
        torch.testing.assert_close(out, want, rtol=1e-5, atol=tol)
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=tol)


# flatten and contiguous of a permuted planned value: copies; the contiguous of a contiguous
# value: the operand itself.
FLATTEN_CONTIGUOUS = """
graph @f(%x: f32[4,6,5]) -> (f32[4,30], f32[5,6,4], f32[4,6,5]) {
  %e = exp(%x) : f32[4,6,5]
  %t = permute(%e) {dims = [0, 2, 1]} : f32[4,5,6]
  %f = flatten(%t) {start_dim = 1} : f32[4,30]
  %u = permute(%e) {dims = [2, 1, 0]} : f32[5,6,4]
  %c = contiguous(%u) : f32[5,6,4]
  %n = neg(%e) : f32[4,6,5]
  %k = contiguous(%n) : f32[4,6,5]
  %a = sin(%f) : f32[4,30]
  %b = cos(%c) : f32[5,6,4]
  %d = abs(%k) : f32[4,6,5]
  return(%a, %b, %d)
}"""


def test_flatten_and_contiguous_copy_into_their_slices() -> None:
    g = ir.parse(FLATTEN_CONTIGUOUS)
    compiled = ir.compile(g)
    assert compiled.stats["planned_copies"] == 2  # %f and %c; %k's operand is contiguous
    torch.manual_seed(0)
    for _ in range(3):
        x = torch.randn(4, 6, 5)
        e = torch.exp(x)
        want = (torch.sin(e.permute(0, 2, 1).flatten(1)), torch.cos(e.permute(2, 1, 0)), e)
        outs = compiled.run([x])
        refs = ir.run(g, [x])
        for out, ref, w in zip(outs, refs, want, strict=True):
            torch.testing.assert_close(out, w, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
