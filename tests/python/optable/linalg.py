"""Op-table rows: linear algebra (matmul family, linear, addmm, baddbmm, outer) and the layer ops
registered with it (embedding, dropout, scaled_dot_product_attention, pixel_shuffle/unshuffle).

Tolerances: the interpreter accumulates in double and rounds once; PyTorch accumulates f32 in
f32 (blocked, so the order differs), which for sums of ~100 products of N(0,1) values is off by
~1e-5 absolute near cancellation: f32 rows with long contractions use rtol 1e-4 / atol 1e-4
(LONG). f16/bf16 rows keep the harness defaults (1e-2) where torch accumulates in f32 and
rounds once, and use LOW_LONG (rtol 2e-2, atol 5e-2) where it rounds per block (long
contractions, attention's softmax in low precision)."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F

from optable.spec import Arg, OpCase

LONG = (1e-4, 1e-4)
LOW_LONG = (2e-2, 5e-2)
INTS = ("i64", "i32")


def case(
    op: str,
    ref: Callable[..., Any],
    args: Sequence[Arg],
    attrs: dict[str, Any] | None = None,
    *,
    name: str = "",
    dtypes: tuple[str, ...] = ("f32",),
    tol: tuple[float, float] | None = None,
    low: tuple[str, ...] = (),
    low_tol: tuple[float, float] | None = None,
    ints: tuple[str, ...] = (),
    noncontig: bool = True,
) -> list[OpCase]:
    """One row per tolerance group: `dtypes` with `tol`, `low` (f16/bf16) with `low_tol`, `ints`
    exact. Case ids include the dtype, so the groups share the name."""
    out = []
    for group, t in ((dtypes, tol), (low, low_tol), (ints, None)):
        if group:
            out.append(
                OpCase(op, ref, args, dict(attrs or {}), dtypes=group, name=name,
                       rtol=t[0] if t else None, atol=t[1] if t else None, noncontig=noncontig)
            )
    return out


def rows(*groups: list[OpCase]) -> list[OpCase]:
    return [c for g in groups for c in g]


LP = ("bf16", "f16")

# ---- matmul family ----------------------------------------------------------------------------

_MATMUL = [
    ("dot", (127,), (127,)),
    ("vec_mat", (7,), (7, 5)),
    ("mat_vec", (3, 7), (7,)),
    ("mm", (7, 127), (127, 5)),
    ("batched_bcast", (2, 1, 3, 7), (4, 7, 5)),
    ("nd_2d", (2, 3, 7), (7, 4)),
    ("2d_nd", (3, 7), (2, 7, 4)),
    ("1d_nd", (7,), (2, 7, 3)),
    ("nd_1d", (2, 3, 7), (7,)),
    ("batch1", (1, 5, 7), (1, 7, 3)),
    ("empty", (0, 3), (3, 4)),
    ("k0", (2, 0), (0, 3)),
]

CASES: list[OpCase] = rows(
    *[
        case("matmul", torch.matmul, [Arg(a), Arg(b)], name=n, tol=LONG, low=LP, low_tol=LOW_LONG, ints=INTS)
        for n, a, b in _MATMUL
    ],
    case("matmul", torch.matmul, [Arg((3, 5)), Arg((5, 4))], name="wrap", ints=("i8", "u8", "i16"), dtypes=("f64",)),
    case("mm", torch.mm, [Arg((7, 33)), Arg((33, 127))], tol=LONG, low=LP, ints=INTS),
    case("mm", torch.mm, [Arg((1, 1)), Arg((1, 0))], name="empty"),
    case("bmm", torch.bmm, [Arg((3, 7, 16)), Arg((3, 16, 5))], tol=LONG, low=LP, ints=INTS),
    case("bmm", torch.bmm, [Arg((0, 2, 3)), Arg((0, 3, 4))], name="empty"),
    case("mv", torch.mv, [Arg((7, 127)), Arg((127,))], tol=LONG, low=LP, low_tol=LOW_LONG, ints=INTS),
    case("dot", torch.dot, [Arg((127,)), Arg((127,))], tol=LONG, low=LP, low_tol=LOW_LONG, ints=INTS),
    case("outer", torch.outer, [Arg((7,)), Arg((5,))], low=LP, ints=INTS + ("bool",)),
    case("outer", torch.outer, [Arg((3,), dtype="i64"), Arg((4,))], name="promote", dtypes=("f32",), low=("bf16",)),
    case("linear", F.linear, [Arg((2, 7, 127)), Arg((5, 127)), Arg((5,))], tol=LONG, low=LP, low_tol=LOW_LONG, ints=INTS),
    case("linear", F.linear, [Arg((3, 7)), Arg((4, 7))], name="nobias", low=LP, ints=INTS),
    case("linear", F.linear, [Arg((7,)), Arg((4, 7)), Arg((4,))], name="vec_input", low=LP),
    case("linear", F.linear, [Arg((3, 7)), Arg((7,))], name="vec_weight", low=LP),
    case("linear", F.linear, [Arg((1, 7)), Arg((5, 7)), Arg((1, 5))], name="bias2d", low=LP),
    case("linear", F.linear, [Arg((0, 7)), Arg((5, 7)), Arg((5,))], name="empty"),
    case(
        "addmm",
        lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=-2.0),
        [Arg((5,)), Arg((3, 33)), Arg((33, 5))],
        {"beta": 0.5, "alpha": -2.0},
        tol=LONG,
        low=LP,
        low_tol=LOW_LONG,
    ),
    case("addmm", torch.addmm, [Arg((3, 5)), Arg((3, 7)), Arg((7, 5))], name="default", low=LP, ints=INTS),
    case(
        "addmm",
        lambda c, a, b: torch.addmm(c, a, b, beta=0, alpha=3),
        [Arg((1, 1)), Arg((2, 7)), Arg((7, 4))],
        {"beta": 0, "alpha": 3},
        name="int_scalars",
        ints=INTS,
    ),
    case(
        "baddbmm",
        lambda c, a, b: torch.baddbmm(c, a, b, beta=2.0, alpha=0.5),
        [Arg((2, 1, 5)), Arg((2, 3, 16)), Arg((2, 16, 5))],
        {"beta": 2.0, "alpha": 0.5},
        tol=LONG,
        low=LP,
    ),
    case("baddbmm", torch.baddbmm, [Arg((4, 3, 5)), Arg((4, 3, 7)), Arg((4, 7, 5))], name="default", ints=INTS),
)

# ---- layers ------------------------------------------------------------------------------------

_FLOATS = ("f32", "f64")


def _sdpa(**kw: Any) -> Callable[..., torch.Tensor]:
    return lambda q, k, v, m=None: F.scaled_dot_product_attention(q, k, v, attn_mask=m, **kw)


CASES += rows(
    case("embedding", lambda w, i: F.embedding(i, w), [Arg((11, 7)), Arg((3, 5), kind="index", high=11)],
         dtypes=_FLOATS, low=LP, ints=INTS + ("i8", "u8", "bool")),
    case("embedding", lambda w, i: F.embedding(i, w), [Arg((4, 3)), Arg((), kind="index", dtype="i32", high=4)],
         name="0d_i32", low=("bf16",), ints=("i64",)),
    case("embedding", lambda w, i: F.embedding(i, w), [Arg((4, 3)), Arg((0, 2), kind="index", high=4)], name="empty"),
    case("dropout", lambda x: F.dropout(x, 0.5, training=False), [Arg((7, 127))], {"p": 0.5, "train": False},
         name="eval", dtypes=_FLOATS, low=LP, ints=INTS + ("bool",)),
    case("dropout", lambda x: F.dropout(x, 0.0, training=True), [Arg((3, 7))], {"p": 0.0, "train": True},
         name="p0", low=LP),
    case("dropout", lambda x: F.dropout(x, 1.0, training=True), [Arg((3, 7))], {"p": 1.0, "train": True},
         name="p1", low=LP),
    case("scaled_dot_product_attention", _sdpa(), [Arg((2, 3, 7, 16)), Arg((2, 3, 9, 16)), Arg((2, 3, 9, 5))],
         dtypes=_FLOATS, tol=LONG, low=LP, low_tol=LOW_LONG),
    case("scaled_dot_product_attention", _sdpa(is_causal=True), [Arg((1, 2, 7, 8)), Arg((1, 2, 7, 8)), Arg((1, 2, 7, 8))],
         {"is_causal": True}, name="causal", tol=LONG, low=LP, low_tol=LOW_LONG),
    case("scaled_dot_product_attention", _sdpa(is_causal=True), [Arg((3, 8)), Arg((5, 8)), Arg((5, 4))],
         {"is_causal": True}, name="causal_rect_2d", tol=LONG, low=LP, low_tol=LOW_LONG),
    case("scaled_dot_product_attention", _sdpa(), [Arg((2, 4, 8)), Arg((2, 6, 8)), Arg((2, 6, 3)), Arg((4, 6), dtype="bool")],
         name="bool_mask", tol=LONG, low=LP, low_tol=LOW_LONG),
    case("scaled_dot_product_attention", _sdpa(scale=0.3), [Arg((2, 2, 4, 8)), Arg((2, 1, 6, 8)), Arg((1, 2, 6, 3)), Arg((2, 1, 4, 6))],
         {"scale": 0.3}, name="float_mask_bcast", tol=LONG, low=LP, low_tol=LOW_LONG),
    case("scaled_dot_product_attention", _sdpa(enable_gqa=True), [Arg((1, 4, 3, 8)), Arg((1, 2, 5, 8)), Arg((1, 2, 5, 8))],
         {"enable_gqa": True}, name="gqa", tol=LONG, low=LP, low_tol=LOW_LONG),
    case("scaled_dot_product_attention", _sdpa(), [Arg((0, 2, 3, 4)), Arg((0, 2, 5, 4)), Arg((0, 2, 5, 4))], name="empty"),
    case("pixel_shuffle", lambda x: F.pixel_shuffle(x, 2), [Arg((2, 12, 3, 5))], {"upscale_factor": 2},
         low=LP, ints=INTS + ("bool",)),
    case("pixel_shuffle", lambda x: F.pixel_shuffle(x, 3), [Arg((9, 1, 2))], {"upscale_factor": 3}, name="unbatched"),
    case("pixel_unshuffle", lambda x: F.pixel_unshuffle(x, 2), [Arg((2, 3, 4, 6))], {"downscale_factor": 2},
         low=LP, ints=INTS + ("bool",)),
)
