"""Differential rows for the creation ops and size queries (src/ir/ops/creation.cpp).

Ops without tensor operands get one row per dtype, with the dtype as the `dtype` attribute (the
row's dtype then names the result dtype). `empty`/`empty_like` are zero-filled by xjit, so their
reference is the zero-filled tensor of the same shape and dtype."""
from __future__ import annotations

import torch

from optable.spec import Arg, OpCase

TORCH = {
    "f64": torch.float64, "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
    "i64": torch.int64, "i32": torch.int32, "i16": torch.int16, "i8": torch.int8, "u8": torch.uint8,
    "bool": torch.bool,
}
NUM = ("f32", "bf16", "f16", "i64", "i32")
MOVE = NUM + ("bool",)


def per_dtype(op, ref, attrs, name, dtypes=NUM, **kw):
    """One row per dtype: ref(torch_dtype) must build the expected tensor."""
    return [OpCase(op, lambda d=d: ref(TORCH[d]), [], {**attrs, "dtype": d}, dtypes=(d,), name=name, **kw)
            for d in dtypes]


def case(op, ref, args, attrs=None, name="", dtypes=MOVE, **kw):
    return OpCase(op, ref, args, attrs or {}, dtypes=dtypes, name=name, **kw)


CASES: list[OpCase] = [
    # ---- arange: dtype inferred (int64 for int bounds, f32 otherwise) or given ----
    OpCase("arange", lambda: torch.arange(10), [], {"end": 10}, dtypes=("i64",), name="int"),
    OpCase("arange", lambda: torch.arange(-1.5, 2.0, 0.25), [], {"start": -1.5, "end": 2.0, "step": 0.25},
           dtypes=("f32",), name="float"),
    OpCase("arange", lambda: torch.arange(10, -3, -3), [], {"start": 10, "end": -3, "step": -3},
           dtypes=("i64",), name="negstep"),
    OpCase("arange", lambda: torch.arange(5, 5), [], {"start": 5, "end": 5}, dtypes=("i64",), name="empty"),
    *per_dtype("arange", lambda d: torch.arange(0, 127, dtype=d), {"start": 0, "end": 127}, "dtype"),
    *per_dtype("arange", lambda d: torch.arange(0.5, 7, 1.5, dtype=d), {"start": 0.5, "end": 7, "step": 1.5},
               "fracstep"),
    # ---- linspace / eye ----
    # Integer linspace with an inexact step depends on ATen's SIMD lane count (a vector's lanes
    # step from a truncated base), so long integer rows use exactly representable steps.
    *per_dtype("linspace", lambda d: torch.linspace(-2, 5, 127, dtype=d), {"start": -2, "end": 5, "steps": 127},
               "odd", dtypes=("f32", "bf16", "f16")),
    *per_dtype("linspace", lambda d: torch.linspace(-7, 119, 127, dtype=d), {"start": -7, "end": 119, "steps": 127},
               "odd_int", dtypes=("i64", "i32")),
    *per_dtype("linspace", lambda d: torch.linspace(0, 10, 7, dtype=d), {"start": 0, "end": 10, "steps": 7},
               "small"),
    OpCase("linspace", lambda: torch.linspace(3.0, 4.0, 1), [], {"start": 3.0, "end": 4.0, "steps": 1},
           dtypes=("f32",), name="one"),
    OpCase("linspace", lambda: torch.linspace(3.0, 4.0, 0), [], {"start": 3.0, "end": 4.0, "steps": 0},
           dtypes=("f32",), name="none"),
    *per_dtype("eye", lambda d: torch.eye(3, 5, dtype=d), {"n": 3, "m": 5}, "rect", dtypes=MOVE),
    OpCase("eye", lambda: torch.eye(4), [], {"n": 4}, dtypes=("f32",), name="square"),
    # ---- full / zeros / ones / empty ----
    OpCase("full", lambda: torch.full((2, 3), 7), [], {"shape": [2, 3], "fill_value": 7}, dtypes=("i64",),
           name="int"),
    OpCase("full", lambda: torch.full((2, 3), 1.25), [], {"shape": [2, 3], "fill_value": 1.25}, dtypes=("f32",),
           name="float"),
    OpCase("full", lambda: torch.full((3,), True), [], {"shape": [3], "fill_value": True}, dtypes=("bool",),
           name="bool"),
    *per_dtype("full", lambda d: torch.full((4, 0), -3, dtype=d), {"shape": [4, 0], "fill_value": -3}, "empty"),
    *per_dtype("full", lambda d: torch.full((), 2.5, dtype=d), {"shape": [], "fill_value": 2.5}, "0d"),
    *per_dtype("zeros", lambda d: torch.zeros(3, 7, dtype=d), {"shape": [3, 7]}, "", dtypes=MOVE),
    OpCase("zeros", lambda: torch.zeros(2), [], {"shape": [2]}, dtypes=("f32",), name="default"),
    *per_dtype("ones", lambda d: torch.ones(127, dtype=d), {"shape": [127]}, "", dtypes=MOVE),
    *per_dtype("empty", lambda d: torch.zeros(2, 5, dtype=d), {"shape": [2, 5]}, ""),
    # ---- *_like / new_* ----
    case("zeros_like", torch.zeros_like, [Arg((3, 4))]),
    case("zeros_like", lambda x: torch.zeros_like(x, dtype=torch.int32), [Arg((3, 4))], {"dtype": "i32"},
         name="dtype", dtypes=("f32", "bf16", "i64")),
    case("ones_like", torch.ones_like, [Arg((2, 0, 3))], name="empty"),
    case("ones_like", torch.ones_like, [Arg(())], name="0d"),
    case("full_like", lambda x: torch.full_like(x, -2), [Arg((3, 4))], {"fill_value": -2}, dtypes=NUM),
    case("full_like", lambda x: torch.full_like(x, 2.5, dtype=torch.float16), [Arg((7,))],
         {"fill_value": 2.5, "dtype": "f16"}, name="dtype", dtypes=("i64", "f32", "bf16")),
    case("empty_like", torch.zeros_like, [Arg((3, 4))]),
    case("new_zeros", lambda x: x.new_zeros((2, 5)), [Arg((3, 4))], {"shape": [2, 5]}),
    case("new_ones", lambda x: x.new_ones((2, 5), dtype=torch.int32), [Arg((3,))], {"shape": [2, 5], "dtype": "i32"},
         name="dtype", dtypes=("f32", "bf16", "i64")),
    case("new_full", lambda x: x.new_full((4,), 3), [Arg((3,))], {"shape": [4], "fill_value": 3}, dtypes=NUM),
    case("new_empty", lambda x: x.new_zeros((1, 3)), [Arg((2,))], {"shape": [1, 3]}),
    # ---- size queries (Python ints) ----
    case("size", lambda x: x.size(1), [Arg((3, 5, 7))], {"dim": 1}),
    case("size", lambda x: x.size(-1), [Arg((3, 0))], {"dim": -1}, name="neg"),
    case("numel", torch.numel, [Arg((3, 5, 7))]),
    case("numel", torch.numel, [Arg(())], name="0d"),
    case("dim", lambda x: x.dim(), [Arg((3, 5, 7))]),
    case("dim", lambda x: x.dim(), [Arg(())], name="0d"),
]
