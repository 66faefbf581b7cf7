"""Which kernel failures are the program's and which are xjit's (docs/runtime.md "Errors"):
values a kernel rejects (an index out of range) are user errors; a kernel that cannot run for a
reason of its own (here oneDNN's result allocation failing: 2^48 bytes, more than any address
space) is an internal error. Through xjit.ir (the error's `internal` flag) and through xjit.jit
(a user error reruns the call in Python without a warning; an internal one warns once)."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
ir = pytest.importorskip("xjit.ir")
xjit = pytest.importorskip("xjit")

N = 1 << 23  # an [N, N] f32 product is 2^48 bytes

OUTER = ir.parse("""
graph @f(%a: f32[s0,1], %b: f32[1,s0]) -> (f32[s0,s0]) {
  %y = matmul(%a, %b) : f32[s0,s0]
  return(%y)
}""")

GATHER = ir.parse("""
graph @f(%x: f32[4,9], %i: i64[4,5]) -> (f32[4,5]) {
  %y = gather(%x, %i) {dim = 1} : f32[4,5]
  return(%y)
}""")


def test_a_kernel_that_cannot_allocate_is_an_internal_error() -> None:
    cg = ir.compile(OUTER)  # symbolic sizes: oneDNN's kernel allocates its result
    torch.testing.assert_close(cg(torch.ones(3, 1), torch.ones(1, 3))[0], torch.ones(3, 3))
    with pytest.raises(ir.XjitError, match="out of memory") as err:
        cg(torch.ones(N, 1), torch.ones(1, N))
    assert not isinstance(err.value, ir.KernelError)
    assert err.value.internal, err.value


def test_values_a_kernel_rejects_are_a_user_error() -> None:
    cg = ir.compile(GATHER)
    index = torch.randint(0, 9, (4, 5))
    index[1, 2] = 9
    with pytest.raises(ir.XjitError, match="out of bounds") as err:
        cg(torch.randn(4, 9), index)
    assert not err.value.internal, err.value


def outer(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a @ b) * 2


def test_jit_warns_once_for_an_internal_kernel_error() -> None:
    compiled = xjit.jit(outer, dynamic=True)
    a, b = torch.ones(3, 1), torch.ones(1, 3)
    torch.testing.assert_close(compiled(a, b), outer(a, b))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError):  # PyTorch's own allocation fails too
            compiled(torch.ones(N, 1), torch.ones(1, N))
    msgs = [str(w.message) for w in record if issubclass(w.category, xjit.XjitWarning)]
    assert len(msgs) == 1 and "internal error running the graph" in msgs[0], msgs
    assert "out of memory" in msgs[0], msgs
