"""Op-table rows for the reduction family: value reductions over `dims` (with keepdim), index
reductions, variance / norms, softmax-like ops along `dim` and cumulative scans. Each op runs
over one dim and over all dims of odd-sized tensors, on 0-d and on empty tensors where PyTorch
defines the result, in f32, a low-precision float and an integer dtype where supported."""

from __future__ import annotations

from typing import Any, Callable

import torch

from optable.spec import Arg, OpCase

CASES: list[OpCase] = []


def rows(
    op: str,
    ref: Callable[..., Any],
    dtypes: tuple[str, ...],
    variants: list[tuple[str, tuple[int, ...], dict[str, Any]]],
    kind: str = "randn",
    low: float = -3.0,
    high: float = 3.0,
    **kw: Any,
) -> None:
    """One row per (name, shape, attrs) variant; `ref` is called as ref(x, **attrs)."""
    for name, shape, attrs in variants:
        CASES.append(
            OpCase(
                op,
                lambda x, a=attrs: ref(x, **a),
                [Arg(shape, kind=kind, low=low, high=high)],
                {k: v for k, v in attrs.items() if v is not None},
                dtypes=dtypes,
                name=name,
                **kw,
            )
        )


def dims_variants(empty_ok: bool = True) -> list[tuple[str, tuple[int, ...], dict[str, Any]]]:
    """dims over one axis, several axes with keepdim, all axes, 0-d and (optionally) empty."""
    v = [
        ("dim1", (5, 127), {"dims": [1]}),
        ("d0-keep", (7, 5), {"dims": [0], "keepdim": True}),
        ("d02", (3, 4, 7), {"dims": [0, -1]}),
        ("all", (127,), {"dims": []}),
        ("all-keep", (3, 7), {"dims": [], "keepdim": True}),
        ("0d", (), {"dims": []}),
        ("0d-dim", (), {"dims": [0]}),
    ]
    if empty_ok:
        v += [("empty", (0, 3), {"dims": [0]}), ("empty-all", (0, 3), {"dims": []})]
    else:
        v += [("empty-d1", (0, 3), {"dims": [1]})]  # reduces the non-empty dim
    return v


def _dims(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Adapts torch's (dim=None | tuple, keepdim) calling convention to our `dims` list."""

    def call(x: torch.Tensor, dims: list[int], keepdim: bool = False, **kw: Any) -> Any:
        return fn(x, dim=tuple(dims) if dims else None, keepdim=keepdim, **kw)

    return call


def _sum_like(fn: Callable[..., Any]) -> Callable[..., Any]:
    def call(
        x: torch.Tensor, dims: list[int], keepdim: bool = False, dtype: str | None = None
    ) -> Any:
        kw = {"dtype": DTYPES[dtype]} if dtype else {}
        return (
            fn(x, dim=tuple(dims) if dims else None, keepdim=keepdim, **kw)
            if dims or keepdim
            else fn(x, **kw)
        )

    return call


DTYPES = {
    "f64": torch.float64,
    "f32": torch.float32,
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "i64": torch.int64,
    "i32": torch.int32,
    "i8": torch.int8,
}

# Values near 1 keep products and sums well conditioned in every dtype.
rows(
    "sum",
    _sum_like(torch.sum),
    ("f32", "bf16", "i32", "bool"),
    dims_variants(),
    kind="uniform",
    low=-1,
    high=3,
)
rows(
    "sum",
    _sum_like(torch.sum),
    ("f32", "i8"),
    [
        ("dtype", (5, 7), {"dims": [1], "dtype": "f64"}),
        ("dtype-int", (5, 7), {"dims": [1], "dtype": "i32"}),
    ],
)
rows(
    "mean",
    _sum_like(torch.mean),
    ("f32", "bf16", "f16"),
    dims_variants(),
    kind="uniform",
    low=0.5,
    high=2,
)
rows(
    "mean",
    _sum_like(torch.mean),
    ("i32", "f16"),
    [("dtype", (5, 7), {"dims": [1], "dtype": "f32"})],
)
for op, fn in [("amax", torch.amax), ("amin", torch.amin)]:
    rows(
        op,
        lambda x, dims, keepdim=False, f=fn: f(x, dim=dims, keepdim=keepdim),
        ("f32", "bf16", "i32", "bool"),
        dims_variants(empty_ok=False),
    )
for op, fn in [("max", torch.max), ("min", torch.min)]:
    rows(
        op,
        lambda x, f=fn: f(x),
        ("f32", "bf16", "i32", "u8", "bool"),
        [("odd", (7, 127), {}), ("0d", (), {}), ("1d", (5,), {})],
    )
for op, fn in [("any", torch.any), ("all", torch.all)]:
    rows(op, _dims(fn), ("bool", "f32", "i32", "u8"), dims_variants(), kind="int", low=-1, high=2)
rows(
    "count_nonzero",
    lambda x, dims: torch.count_nonzero(x, dim=tuple(dims) if dims else None),
    ("f32", "i32", "bool"),
    [(n, s, {"dims": a["dims"]}) for n, s, a in dims_variants() if "keepdim" not in a],
    kind="int",
    low=-1,
    high=2,
)


# torch.prod takes one dim at a time: reduce the listed dims one by one (highest first).
def _prod(x: torch.Tensor, dims: list[int], keepdim: bool = False) -> torch.Tensor:
    if not dims:
        out = torch.prod(x)
        return out.reshape([1] * x.dim()) if keepdim else out
    for d in sorted((d % max(x.dim(), 1) for d in dims), reverse=True):
        x = torch.prod(x, dim=d, keepdim=keepdim) if x.dim() else torch.prod(x)
    return x


# torch multiplies bf16/f16 products in the low precision dtype (one rounding per factor, in its
# vectorized order), so long products drift from the exactly rounded one: the reduced extent
# stays small here and the 127-sized dims are kept.
PROD_VARIANTS = [
    ("dim1", (127, 7), {"dims": [1]}),
    ("d0-keep", (7, 5), {"dims": [0], "keepdim": True}),
    ("d02", (3, 4, 7), {"dims": [0, -1]}),
    ("all", (3, 5), {"dims": []}),
    ("all-keep", (3, 7), {"dims": [], "keepdim": True}),
    ("0d", (), {"dims": []}),
    ("0d-dim", (), {"dims": [0]}),
    ("empty", (0, 3), {"dims": [0]}),
    ("empty-all", (0, 3), {"dims": []}),
]
rows(
    "prod", _prod, ("f32", "bf16", "i32", "bool"), PROD_VARIANTS, kind="uniform", low=0.5, high=1.5
)
rows("prod", _prod, ("i32", "i8"), [("ints", (5, 7), {"dims": [1]})], kind="int", low=-9, high=9)

# ---- index reductions ----


def _max_dim(fn: Callable[..., Any]) -> Callable[..., Any]:
    return lambda x, dim, keepdim=False: tuple(fn(x, dim, keepdim=keepdim))


INDEX_VARIANTS = [
    ("dim1", (5, 127), {"dim": 1}),
    ("d0-keep", (7, 5), {"dim": 0, "keepdim": True}),
    ("neg", (3, 4, 7), {"dim": -2}),
    ("0d", (), {"dim": 0}),
    ("empty", (0, 3), {"dim": 1}),
]
for op, fn in [("max_dim", torch.max), ("min_dim", torch.min)]:
    rows(op, _max_dim(fn), ("f32", "bf16", "i32", "bool"), INDEX_VARIANTS)
for op, fn in [("argmax", torch.argmax), ("argmin", torch.argmin)]:
    rows(
        op,
        lambda x, dim=None, keepdim=False, f=fn: f(x, dim=dim, keepdim=keepdim),
        ("f32", "bf16", "i32", "u8"),
        INDEX_VARIANTS
        + [("flat", (7, 127), {}), ("flat-keep", (3, 7), {"keepdim": True}), ("flat-0d", (), {})],
    )

# ---- variance and norms ----

VAR_VARIANTS = [
    ("dim1", (5, 127), {"dims": [1]}),
    ("d0-keep", (7, 5), {"dims": [0], "keepdim": True}),
    ("all", (127,), {"dims": []}),
    ("c0", (5, 7), {"dims": [1], "correction": 0}),
    ("c2", (3, 4, 7), {"dims": [0, 2], "correction": 2}),
]


def _var_like(fn: Callable[..., Any], pair: bool = False) -> Callable[..., Any]:
    def call(x: torch.Tensor, dims: list[int], keepdim: bool = False, correction: int = 1) -> Any:
        out = fn(x, dim=tuple(dims) if dims else None, keepdim=keepdim, correction=correction)
        return tuple(out) if pair else out

    return call


for op, fn, pair in [
    ("var", torch.var, False),
    ("std", torch.std, False),
    ("var_mean", torch.var_mean, True),
    ("std_mean", torch.std_mean, True),
]:
    rows(op, _var_like(fn, pair), ("f32", "bf16", "f16"), VAR_VARIANTS)


def _norm(
    x: torch.Tensor,
    dims: list[int] | None = None,
    keepdim: bool = False,
    p: float = 2.0,
    dtype: str | None = None,
) -> torch.Tensor:
    kw = {"dtype": DTYPES[dtype]} if dtype else {}
    return torch.linalg.vector_norm(
        x, ord=p, dim=tuple(dims) if dims else None, keepdim=keepdim, **kw
    )


rows(
    "norm",
    _norm,
    ("f32", "bf16", "f16"),
    [(n, s, a) for n, s, a in dims_variants(empty_ok=False)]
    + [
        (f"p{p}", (5, 127), {"dims": [1], "p": p})
        for p in (1.0, 0.0, 3.5, float("inf"), float("-inf"), -1.5)
    ]
    + [("dtype", (5, 7), {"dims": [1], "dtype": "f64"}), ("empty-p2", (0, 3), {"dims": [0]})],
)

# ---- softmax, log_softmax, logsumexp, cumulative ops ----

SCAN_VARIANTS = [
    ("last", (5, 127), {"dim": -1}),
    ("d0", (7, 5), {"dim": 0}),
    ("mid", (3, 4, 7), {"dim": 1}),
    ("0d", (), {"dim": 0}),
    ("empty", (0, 3), {"dim": 0}),
]
for op, fn in [("softmax", torch.softmax), ("log_softmax", torch.log_softmax)]:
    rows(
        op,
        lambda x, dim, dtype=None, f=fn: f(x, dim, dtype=DTYPES[dtype] if dtype else None),
        ("f32", "bf16", "f16"),
        SCAN_VARIANTS + [("dtype", (5, 7), {"dim": 1, "dtype": "f64"})],
        low=-10,
        high=10,
    )
    rows(
        op,
        lambda x, dim, dtype=None, f=fn: f(x, dim, dtype=DTYPES[dtype]),
        ("i32",),
        [("int-dtype", (5, 7), {"dim": 1, "dtype": "f32"})],
    )
rows(
    "logsumexp",
    lambda x, dims, keepdim=False: torch.logsumexp(
        x, dim=tuple(dims) if dims else tuple(range(x.dim())), keepdim=keepdim
    ),
    ("f32", "bf16", "i32"),
    dims_variants(),
)
for op, fn in [("cumsum", torch.cumsum), ("cumprod", torch.cumprod)]:
    rows(
        op,
        lambda x, dim, dtype=None, f=fn: f(x, dim, dtype=DTYPES[dtype] if dtype else None),
        ("f32", "bf16", "i32", "bool"),
        SCAN_VARIANTS,
        kind="uniform",
        low=0.9,
        high=1.1,
    )
    rows(
        op,
        lambda x, dim, dtype=None, f=fn: f(x, dim, dtype=DTYPES[dtype]),
        ("i8", "f32"),
        [
            ("dtype", (5, 7), {"dim": 1, "dtype": "i8"}),
            ("dtype-f", (5, 7), {"dim": 0, "dtype": "f64"}),
        ],
        kind="int",
        low=-4,
        high=5,
    )
# histc: ATen's float binning (the max edge in the last bin), its data range when min == max,
# and the router's integer-valued expert ids (kind="int" values in [0, 4)).
rows(
    "histc",
    lambda x, bins, min=0, max=0: torch.histc(x, bins=bins, min=min, max=max),
    ("f32", "f64"),
    [
        ("range", (50,), {"bins": 7, "min": -2, "max": 2}),
        ("data", (5, 9), {"bins": 4}),
    ],
)
rows(
    "histc",
    lambda x, bins, min=0, max=0: torch.histc(x, bins=bins, min=min, max=max),
    ("f32", "f64"),
    [("ids", (40,), {"bins": 4, "min": 0, "max": 3})],
    kind="int",
    low=0,
    high=4,
)
