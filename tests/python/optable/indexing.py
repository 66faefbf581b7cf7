"""Differential rows for the indexing and sorting ops (src/ir/ops/indexing.cpp,
movement_advindex.cpp, movement_sort.cpp).

Index operands are random in range ("index") or unique ("perm") where duplicate targets would make
PyTorch's result order-dependent (scatter without reduction, index_put without accumulate).
Sorting rows either ask for a stable sort or use data without ties, so indices are comparable."""
from __future__ import annotations

import torch

from optable.spec import Arg, OpCase

MOVE = ("f32", "bf16", "f16", "i64", "i32", "bool")
NUM = ("f32", "bf16", "i64", "i32")
aten = torch.ops.aten


def case(op, ref, args, attrs=None, name="", dtypes=MOVE, **kw):
    return OpCase(op, ref, args, attrs or {}, dtypes=dtypes, name=name, **kw)


def idx(shape, high, dtype="i64"):
    return Arg(shape, dtype=dtype, kind="index", high=high)


def perm(shape, high):
    return Arg(shape, dtype="i64", kind="perm", high=high)


CASES: list[OpCase] = [
    # ---- index_select / gather / take_along_dim ----
    case("index_select", lambda x, i: torch.index_select(x, 1, i), [Arg((5, 7)), idx((4,), 7)], {"dim": 1}),
    case("index_select", lambda x, i: torch.index_select(x, -1, i), [Arg((3, 127)), idx((9,), 127, "i32")],
         {"dim": -1}, name="i32"),
    case("index_select", lambda x, i: torch.index_select(x, 0, i), [Arg((5, 3)), idx((), 5)], {"dim": 0},
         name="0d_index"),
    case("index_select", lambda x, i: torch.index_select(x, 0, i), [Arg((5, 3)), idx((0,), 5)], {"dim": 0},
         name="empty"),
    case("gather", lambda x, i: torch.gather(x, 1, i), [Arg((5, 7)), idx((5, 3), 7)], {"dim": 1}),
    case("gather", lambda x, i: torch.gather(x, 0, i), [Arg((5, 7)), idx((3, 4), 5)], {"dim": 0}, name="d0"),
    case("gather", lambda x, i: torch.gather(x, -1, i), [Arg((4, 7)), idx((4, 0), 7)], {"dim": -1}, name="empty"),
    case("take_along_dim", lambda x, i: torch.take_along_dim(x, i, 1), [Arg((5, 7)), idx((5, 2), 7)], {"dim": 1}),
    case("take_along_dim", lambda x, i: torch.take_along_dim(x, i, 0), [Arg((5, 7)), idx((3, 1), 5)], {"dim": 0},
         name="broadcast"),
    case("take_along_dim", torch.take_along_dim, [Arg((3, 4)), idx((5,), 12)], name="flat"),
    # ---- scatter family ----
    case("scatter", lambda x, i, s: torch.scatter(x, 1, i, s), [Arg((5, 12)), perm((2, 6), 12), Arg((3, 7))],
         {"dim": 1}),
    case("scatter", lambda x, i: torch.scatter(x, 1, i, 1.5), [Arg((5, 12)), perm((3, 4), 12)],
         {"dim": 1, "value": 1.5}, name="value_attr", dtypes=NUM),
    case("scatter", lambda x, i, v: torch.scatter(x, -1, i, v), [Arg((5, 12)), perm((2, 6), 12), Arg(scalar=3)],
         {"dim": -1}, name="value_operand", dtypes=NUM),
    case("scatter", lambda x, i, s: torch.scatter(x, 0, i, s, reduce="add"), [Arg((5, 4)), idx((6, 4), 5),
         Arg((6, 4))], {"dim": 0, "reduce": "add"}, name="add", dtypes=("f32", "f64", "i64", "i32")),
    case("scatter", lambda x, i, s: torch.scatter(x, 0, i, s, reduce="multiply"), [Arg((5, 4)), idx((6, 4), 5),
         Arg((6, 4))], {"dim": 0, "reduce": "multiply"}, name="multiply", dtypes=("f32", "f64", "i64")),
    case("scatter_add", lambda x, i, s: torch.scatter_add(x, 0, i, s), [Arg((5, 4)), idx((7, 3), 5), Arg((7, 4))],
         {"dim": 0}, dtypes=("f32", "f64", "i64", "i32")),
    case("scatter_add", lambda x, i, s: torch.scatter_add(x, 0, i, s), [Arg((5, 4)), idx((2, 3), 5), Arg((7, 4))],
         {"dim": 0}, name="lowp", dtypes=("bf16", "f16")),
] + [
    case("scatter_reduce", lambda x, i, s, r=reduce, inc=include: torch.scatter_reduce(x, 1, i, s, r,
         include_self=inc), [Arg((4, 6)), idx((4, 9), 6), Arg((4, 9))],
         {"dim": 1, "reduce": reduce, "include_self": include}, name=f"{reduce}_{'self' if include else 'noself'}",
         dtypes=("f32", "f64", "i64", "i32"))
    for reduce in ("sum", "prod", "mean", "amax", "amin") for include in (True, False)
] + [
    case("scatter_reduce", lambda x, i, s, r=reduce: torch.scatter_reduce(x, 0, i, s, r), [Arg((5, 3)),
         idx((4, 3), 5), Arg((4, 3))], {"dim": 0, "reduce": reduce}, name=f"{reduce}_lowp", dtypes=("bf16", "f16"))
    for reduce in ("sum", "amax", "amin")
] + [
    case("masked_scatter", lambda x, m, s: x.masked_scatter(m, s), [Arg((3, 4)), Arg((3, 4), dtype="bool"),
         Arg((12,))]),
    case("masked_scatter", lambda x, m, s: x.masked_scatter(m, s), [Arg((3, 4)), Arg((4,), dtype="bool"),
         Arg((15,))], name="broadcast"),
    # ---- advanced indexing ----
    case("index", lambda x, i: x[i], [Arg((5, 6)), idx((4,), 5)]),
    case("index", lambda x, n, i, j: x[:, i, j], [Arg((5, 6, 7)), Arg(), idx((3,), 6), idx((3,), 7)],
         name="adjacent"),
    case("index", lambda x, i, n, j: x[i, :, j], [Arg((5, 6, 7)), idx((2, 3), 5), Arg(), idx((3,), 7)],
         name="separated"),
    case("index", lambda x, i: x[i], [Arg((5, 6)), Arg((2, 3), dtype="i64", kind="int", low=-5, high=5)],
         name="negative"),
    case("index", lambda x, i, j: x[i, j], [Arg((5, 6)), idx((2, 1), 5, "i32"), idx((3,), 6)], name="broadcast"),
    case("index", lambda x, i: x[i], [Arg((5, 6)), idx((0,), 5)], name="empty"),
    case("index_put", lambda x, v, i: x.index_put((i,), v), [Arg((5, 6)), Arg((3, 6)), perm((3,), 5)]),
    case("index_put", lambda x, v, i: x.index_put((i,), v, accumulate=True), [Arg((5, 6)), Arg((7, 1)),
         idx((7,), 5)], {"accumulate": True}, name="accumulate", dtypes=("f32", "f64", "i64", "i32")),
    case("index_put", lambda x, v, n, i: aten.index_put(x, [None, i], v), [Arg((5, 6)), Arg(()), Arg(),
         perm((2,), 6)], name="slice_first"),
    case("index_put", lambda x, v, i, j: x.index_put((i, j), v), [Arg((5, 6)), Arg((4,)), perm((4,), 5),
         idx((4,), 6)], name="pairs"),
    case("index_put_", lambda x, v, i: x.index_put_((i,), v), [Arg((5, 6)), Arg((6,)), perm((3,), 5)]),
    # ---- in-place writes ----
    case("copy_", lambda d, s: d.copy_(s), [Arg((3, 4)), Arg((4,))]),
    case("copy_", lambda d, s: d.copy_(s), [Arg((3, 4)), Arg((3, 4), dtype="i32")], name="convert",
         dtypes=("f32", "bf16", "i64")),
    case("fill_", lambda x, v: x.fill_(v), [Arg((3, 4)), Arg(scalar=2)], dtypes=NUM),
    case("fill_", lambda x: x.fill_(-1.5), [Arg((5,))], {"value": -1.5}, name="attr", dtypes=("f32", "bf16", "f16")),
    case("fill_", lambda x, v: x.fill_(v), [Arg((2, 3)), Arg(())], name="tensor_value"),
    # ---- sorting ----
    case("sort", lambda x: torch.sort(x, stable=True), [Arg((5, 7), kind="int", low=-3, high=3)],
         {"stable": True}, dtypes=("f32", "bf16", "f16", "i64", "i32", "i16")),
    case("sort", lambda x: torch.sort(x, dim=0, descending=True, stable=True), [Arg((127, 3), kind="int")],
         {"dim": 0, "descending": True, "stable": True}, name="desc", dtypes=("f32", "bf16", "i64", "bool")),
    case("sort", lambda x: torch.sort(x), [Arg((4, 33))], name="unstable_no_ties", dtypes=("f32", "f64")),
    case("sort", lambda x: torch.sort(x), [Arg(())], name="0d", dtypes=("f32", "i64")),
    case("argsort", lambda x: torch.argsort(x, dim=-1, stable=True), [Arg((5, 7), kind="int")], {"stable": True},
         dtypes=("f32", "bf16", "i64", "i32")),
    case("argsort", lambda x: torch.argsort(x, dim=0, descending=True, stable=True), [Arg((6, 3), kind="int")],
         {"dim": 0, "descending": True, "stable": True}, name="desc", dtypes=("f32", "bf16", "i32")),
    case("topk", lambda x: torch.topk(x, 3), [Arg((4, 7))], {"k": 3}, dtypes=("f32", "f64", "bf16")),
    case("topk", lambda x: torch.topk(x, 2, 0, largest=False), [Arg((5, 6), kind="int", low=-100000,
         high=100000)], {"k": 2, "dim": 0, "largest": False}, name="smallest", dtypes=("f32", "i64", "i32")),
    case("topk", lambda x: torch.topk(x, 0), [Arg((3, 5))], {"k": 0}, name="k0", dtypes=("f32", "i64")),
]
