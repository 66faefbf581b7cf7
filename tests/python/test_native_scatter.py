"""The CPU target's native scatter, scatter_add and scatter_reduce (src/backend/scatter.cpp):
compiled graphs against the reference interpreter bit for bit (each element takes its values in
the same order, in the result's dtype) and against eager PyTorch, for every reduction, with and
without self in it, duplicate indices, every dim of rank 1-3, strided operands, src larger than
the index, a value in place of src, f32 and f64, and sizes that split the loops over the kernel
threads; an index out of range raises the reference kernel's error."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import xjit.ir as ir

_DT = {torch.float32: "f32", torch.float64: "f64"}


def _ty(t: torch.Tensor) -> str:
    dt = {torch.float32: "f32", torch.float64: "f64", torch.int64: "i64"}[t.dtype]
    return f"{dt}[{','.join(map(str, t.shape))}]"


def _graph(op: str, attrs: str, self: torch.Tensor, index: torch.Tensor, src: Any) -> str:
    if isinstance(src, torch.Tensor):
        args, params = "%s, %i, %v", f"%s: {_ty(self)}, %i: {_ty(index)}, %v: {_ty(src)}"
    else:
        args, params = "%s, %i", f"%s: {_ty(self)}, %i: {_ty(index)}"
    return f"""
graph @f({params}) -> ({_ty(self)}) {{
  %o = {op}({args}) {{{attrs}}} : {_ty(self)}
  return(%o)
}}"""


def _eager(op: str, dim: int, self: torch.Tensor, index: torch.Tensor, src: Any, kw: dict) -> Any:
    if op == "scatter_add":
        return self.scatter_add(dim, index, src)
    if op == "scatter_reduce":
        return self.scatter_reduce(dim, index, src, **kw)
    return self.scatter(dim, index, src, **kw)


def _check(op: str, attrs: str, dim: int, self: torch.Tensor, index: torch.Tensor, src: Any,
           kw: dict, *, vs_eager: bool = True) -> None:
    graph = ir.parse(_graph(op, attrs, self, index, src))
    inputs = [self, index] + ([src] if isinstance(src, torch.Tensor) else [])
    (want,) = ir.run(graph, inputs, framework="torch")
    cg = ir.compile(ir.parse(_graph(op, attrs, self, index, src)))
    (got,) = cg.run(inputs, framework="torch")
    assert cg.stats["target_ops"] == 1  # the native loop, not the reference kernel
    assert torch.equal(torch.as_tensor(got), torch.as_tensor(want)) or (
        torch.as_tensor(got).isnan().any()
        and torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True) is None
    )
    if vs_eager:
        torch.testing.assert_close(torch.as_tensor(got), _eager(op, dim, self, index, src, kw),
                                   rtol=1e-5, atol=1e-5, equal_nan=True)


def _index(shape: tuple[int, ...], dim: int, size: int, g: torch.Generator,
           unique: bool = False) -> torch.Tensor:
    if not unique:
        return torch.randint(0, size, shape, generator=g)
    # A permutation prefix along dim for every other position: no target written twice.
    idx = torch.argsort(torch.rand(*shape[:dim], size, *shape[dim + 1 :], generator=g), dim=dim)
    return idx.narrow(dim, 0, shape[dim]).contiguous()


REDUCTIONS = [("sum", True), ("sum", False), ("prod", True), ("prod", False), ("mean", True),
              ("mean", False), ("amax", True), ("amax", False), ("amin", True), ("amin", False)]

# (self shape, index shape, dim)
SHAPES = [((7,), (20,), 0), ((6, 5), (15, 5), 0), ((6, 5), (6, 9), 1), ((6, 5), (4, 9), -1),
          ((3, 4, 5), (8, 4, 5), 0), ((3, 4, 5), (3, 9, 2), 1), ((3, 4, 5), (2, 4, 11), 2)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape,ishape,dim", SHAPES)
def test_scatter_add_matches_reference_and_eager(
    shape: tuple[int, ...], ishape: tuple[int, ...], dim: int, dtype: torch.dtype
) -> None:
    g = torch.Generator().manual_seed(len(shape) * 10 + dim)
    self = torch.randn(shape, generator=g, dtype=dtype)
    index = _index(ishape, dim % len(shape), shape[dim], g)
    src = torch.randn(ishape, generator=g, dtype=dtype)
    _check("scatter_add", f"dim = {dim}", dim, self, index, src, {})


@pytest.mark.parametrize("reduce,include_self", REDUCTIONS)
@pytest.mark.parametrize("shape,ishape,dim", SHAPES[1:5])
def test_scatter_reduce_matches_reference_and_eager(
    shape: tuple[int, ...], ishape: tuple[int, ...], dim: int, reduce: str, include_self: bool
) -> None:
    g = torch.Generator().manual_seed(7 + dim)
    self = torch.randn(shape, generator=g)
    index = _index(ishape, dim % len(shape), shape[dim], g)
    src = torch.randn(ishape, generator=g)
    src.view(-1)[3] = float("nan")  # amax / amin propagate NaN
    attrs = f'dim = {dim}, reduce = "{reduce}", include_self = {str(include_self).lower()}'
    _check("scatter_reduce", attrs, dim, self, index, src,
           {"reduce": reduce, "include_self": include_self})


@pytest.mark.parametrize("reduce", [None, "add", "multiply"])
def test_scatter_with_src_and_value(reduce: str | None) -> None:
    g = torch.Generator().manual_seed(3)
    self = torch.randn(6, 5, generator=g)
    # scatter without a reduction keeps the last value written: eager leaves duplicates
    # unspecified, so its comparison uses unique targets.
    index = _index((4, 5), 0, 6, g, unique=reduce is None)
    src = torch.randn(4, 5, generator=g)
    kw = {"reduce": reduce} if reduce else {}
    attrs = "dim = 0" + (f', reduce = "{reduce}"' if reduce else "")
    _check("scatter", attrs, 0, self, index, src, kw)
    _check("scatter", attrs + ", value = 2.5", 0, self, index, 2.5, kw)
    dup = torch.randint(0, 6, (9, 5), generator=g)  # the reference's order: the last one wins
    _check("scatter", attrs, 0, self, dup, torch.randn(9, 5, generator=g), kw,
           vs_eager=reduce is not None)


def test_strided_operands_and_a_larger_src() -> None:
    g = torch.Generator().manual_seed(11)
    self = torch.randn(5, 8, generator=g).t()  # [8, 5], strided
    index = torch.randint(0, 8, (5, 7), generator=g).t()  # [7, 5], strided
    src = torch.randn(9, 6, generator=g)  # larger than the index in both dims
    _check("scatter_add", "dim = 0", 0, self, index, src, {})
    _check("scatter_reduce", 'dim = 0, reduce = "mean", include_self = false', 0, self, index,
           src, {"reduce": "mean", "include_self": False})


@pytest.mark.parametrize("dim", [0, 1])
def test_large_scatter_splits_over_threads(dim: int) -> None:
    """A GNN-sized scatter_add (20000 x 64 messages into 5000 nodes): the loops split along the
    other dim; every element still sums its values in index order."""
    g = torch.Generator().manual_seed(dim)
    self = torch.zeros(5000, 64) if dim == 0 else torch.zeros(64, 5000)
    ishape = (20000, 64) if dim == 0 else (64, 20000)
    index = torch.randint(0, 5000, ishape, generator=g)
    src = torch.randn(ishape, generator=g)
    _check("scatter_add", f"dim = {dim}", dim, self, index, src, {})
    _check("scatter_reduce", f'dim = {dim}, reduce = "amax", include_self = false', dim, self,
           index, src, {"reduce": "amax", "include_self": False})


@pytest.mark.parametrize("bad", [5, -1])
def test_index_out_of_range_raises_the_reference_error(bad: int) -> None:
    self, src = torch.zeros(5, 3), torch.ones(4, 3)
    index = torch.tensor([[0, 1, 2], [4, 4, 4], [1, bad, 0], [2, 2, 2]])
    text = _graph("scatter_add", "dim = 0", self, index, src)
    with pytest.raises(Exception) as want:
        ir.run(ir.parse(text), [self, index, src], framework="torch")
    with pytest.raises(Exception) as got:
        ir.compile(ir.parse(text)).run([self, index, src], framework="torch")
    assert f"index {bad} is out of bounds for dimension 0 with size 5" in str(want.value)
    assert f"index {bad} is out of bounds for dimension 0 with size 5" in str(got.value)
    assert type(got.value) is type(want.value)
