"""A softmax kernel computes exp(x - max) once per element: its sum pass keeps the exponentials
in the output buffer and the last pass scales them in place. Also when the softmax is compiled
alone and its consumer is another instruction of the graph (attention's scores feeding the
matmul by v), where it used to compute exp twice. Values against PyTorch, including -inf
scores (masked positions) and a row of them (NaN, as in PyTorch)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
ir = pytest.importorskip("xjit.ir")

ATTENTION_TAIL = """
graph @f(%s: f32[1,3,37,41], %v: f32[1,3,41,8]) -> (f32[1,3,37,8]) {
  %p = softmax(%s) {dim = -1} : f32[1,3,37,41]
  %y = matmul(%p, %v) : f32[1,3,37,8]
  return(%y)
}"""


def fast_loops(cg: object, kernel: str = "softmax") -> str:
    files = dict(cg.dump_files())  # type: ignore[attr-defined]
    (name,) = [n for n in files if kernel in n and n.endswith(".loops")]
    return files[name].split("general version:")[0]


def test_softmax_feeding_a_matmul_computes_exp_once() -> None:
    cg = ir.compile(ir.parse(ATTENTION_TAIL), keep_text=True)
    assert fast_loops(cg).count("exp(") == 1, fast_loops(cg)
    torch.manual_seed(0)
    s, v = torch.randn(1, 3, 37, 41) * 4, torch.randn(1, 3, 41, 8)
    s[0, 1, :, 5] = float("-inf")  # a masked key
    s[0, 2, 7, :] = float("-inf")  # a fully masked row: NaN, as PyTorch gives
    (got,) = cg(s, v)
    want = torch.softmax(s, -1) @ v
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)
    assert got[0, 2, 7].isnan().all()


def test_softmax_read_by_another_op_of_its_kernel_keeps_both_values() -> None:
    # Fused with a consumer, the softmax value is read by an op of the kernel: the exponentials
    # cannot live in the output buffer, and the second output must not be scaled twice.
    text = """
graph @f(%x: f32[16,50]) -> (f32[16,50], f32[16,50]) {
  %p = softmax(%x) {dim = -1} : f32[16,50]
  %q = mul(%p, %p) : f32[16,50]
  return(%p, %q)
}"""
    cg = ir.compile(ir.parse(text))
    x = torch.randn(16, 50) * 3
    p, q = cg(x)
    want = torch.softmax(x, -1)
    torch.testing.assert_close(p, want)
    torch.testing.assert_close(q, want * want)


SAFE_SOFTMAX = """
graph @f(%s: f32[2,3,37,41]) -> (f32[2,3,37,41]) {
  %p = softmax(%s) {dim = -1} : f32[2,3,37,41]
  %m = amax(%s) {dims = [-1], keepdim = true} : f32[2,3,37,1]
  %ninf = constant() {value = -inf} : float
  %e = eq(%m, %ninf) : bool[2,3,37,1]
  %zero = constant() {value = 0.0} : float
  %y = masked_fill(%p, %e, %zero) : f32[2,3,37,41]
  return(%y)
}"""


def test_safe_softmax_computes_max_and_exp_once() -> None:
    # Attention's decomposition with a mask: rows that are all -inf give zeros. The amax is the
    # softmax's own max pass, and the exponentials live in the one output's buffer.
    cg = ir.compile(ir.parse(SAFE_SOFTMAX), keep_text=True)
    loops = fast_loops(cg, "fusion")
    assert loops.count("exp(") == 1, loops
    assert loops.count(" = max(") == 1, loops
    torch.manual_seed(1)
    s = torch.randn(2, 3, 37, 41) * 4
    s[0, 1, :, 5] = float("-inf")  # a masked key
    s[1, 2, 7, :] = float("-inf")  # a fully masked row: zeros
    s[1, 0, 3, 9] = float("nan")  # a NaN score: a NaN row, as in PyTorch
    (got,) = cg(s)
    p = torch.softmax(s, -1)
    want = p.masked_fill(s.amax(-1, keepdim=True) == float("-inf"), 0.0)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)
    assert (got[1, 2, 7] == 0).all() and got[1, 0, 3].isnan().all()


def test_softmax_kept_in_the_output_is_read_by_a_reduction() -> None:
    # The exponentials sit in %y's buffer from the sum pass on; the reduction over p * x reads
    # them there before the output pass overwrites the buffer with %y.
    text = """
graph @f(%x: f32[8,50]) -> (f32[8,50], f32[8,1]) {
  %p = softmax(%x) {dim = -1} : f32[8,50]
  %px = mul(%p, %x) : f32[8,50]
  %h = sum(%px) {dims = [-1], keepdim = true} : f32[8,1]
  %two = constant() {value = 2.0} : float
  %y = mul(%p, %two) : f32[8,50]
  return(%y, %h)
}"""
    cg = ir.compile(ir.parse(text), keep_text=True)
    assert fast_loops(cg, "fusion").count("exp(") == 1, fast_loops(cg, "fusion")
    x = torch.randn(8, 50) * 3
    y, h = cg(x)
    p = torch.softmax(x, -1)
    torch.testing.assert_close(y, p * 2)
    torch.testing.assert_close(h, (p * x).sum(-1, keepdim=True))


@pytest.mark.parametrize("shape", [(37, 1100), (5, 13, 19)])
def test_safe_softmax_over_an_outer_dim(shape: tuple[int, ...]) -> None:
    # Softmax over dim 0 keeps the innermost dim (lane accumulators), fused with the -inf-row
    # test and a consumer: exp kept in the output buffer there too.
    import xjit

    def f(s: torch.Tensor) -> torch.Tensor:
        p = torch.softmax(s, 0)
        return p.masked_fill(s.amax(0, keepdim=True) == float("-inf"), 0.0) * 3

    s = torch.randn(*shape) * 3
    s[:, 7] = float("-inf")
    s[3, 2] = float("nan")
    torch.testing.assert_close(xjit.jit(f)(s), f(s), equal_nan=True)
