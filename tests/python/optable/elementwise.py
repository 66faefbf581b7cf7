"""Op-table rows for the elementwise family: unary math and activations, binary arithmetic,
comparisons, logical and bitwise ops over tensor-or-scalar operands, clamp, where, cast, lerp,
addcmul and addcdiv. Rows are generated from small tables: every op runs on an odd-sized shape,
a 0-d and an empty tensor (binary ops also on size-1 broadcasting and scalar operands), in f32,
a low-precision float and an integer dtype where PyTorch supports the op for them."""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

from optable.spec import Arg, OpCase

FLOAT_LOW = ("f32", "bf16", "f16")  # float-only ops
FLOAT_INT = ("f32", "bf16", "i32")  # ops that also take integers (ints promote as torch does)
NUMERIC = ("f32", "bf16", "i32", "i64")
WITH_BOOL = ("f32", "bf16", "i32", "bool")
INTEGRAL = ("i32", "i64", "u8", "bool")

CASES: list[OpCase] = []


def _arg(
    shape: tuple[int, ...] | None, kind: str, low: float, high: float, dtype: str | None = None
) -> Arg:
    return Arg(shape, dtype=dtype, kind=kind, low=low, high=high)


# ---- unary -----------------------------------------------------------------------------------


def unary(
    op: str,
    ref: Callable[..., Any],
    dtypes: tuple[str, ...],
    attrs: dict[str, Any] | None = None,
    kind: str = "randn",
    low: float = -3.0,
    high: float = 3.0,
    name: str = "",
    **kw: Any,
) -> None:
    """An odd-sized 2-d tensor (also run non-contiguous), a 0-d and an empty tensor."""
    pre = f"{name}-" if name else ""
    for shape, tag in (((7, 127), "odd"), ((), "0d"), ((0, 3), "empty")):
        CASES.append(
            OpCase(
                op,
                ref,
                [_arg(shape, kind, low, high)],
                dict(attrs or {}),
                dtypes=dtypes,
                name=pre + tag,
                **kw,
            )
        )


# (op, torch function, value kind, low, high): float math, integers give f32.
FLOAT_MATH = [
    ("exp", torch.exp, "randn", -3, 3),
    ("exp2", torch.exp2, "randn", -3, 3),
    ("expm1", torch.expm1, "randn", -3, 3),
    ("log", torch.log, "positive", 0.1, 5),
    ("log2", torch.log2, "positive", 0.1, 5),
    ("log10", torch.log10, "positive", 0.1, 5),
    ("log1p", torch.log1p, "uniform", -0.5, 4),
    ("sqrt", torch.sqrt, "positive", 0.1, 5),
    ("rsqrt", torch.rsqrt, "positive", 0.1, 5),
    ("reciprocal", torch.reciprocal, "uniform", 0.2, 4),
    ("sin", torch.sin, "randn", -3, 3),
    ("cos", torch.cos, "randn", -3, 3),
    ("tan", torch.tan, "uniform", -1.2, 1.2),
    ("asin", torch.asin, "uniform", -0.95, 0.95),
    ("acos", torch.acos, "uniform", -0.95, 0.95),
    ("atan", torch.atan, "randn", -3, 3),
    ("sinh", torch.sinh, "randn", -3, 3),
    ("cosh", torch.cosh, "randn", -3, 3),
    ("tanh", torch.tanh, "randn", -3, 3),
    ("asinh", torch.asinh, "randn", -3, 3),
    ("acosh", torch.acosh, "uniform", 1.05, 4),
    ("atanh", torch.atanh, "uniform", -0.9, 0.9),
    ("sigmoid", torch.sigmoid, "randn", -3, 3),
    ("erf", torch.erf, "randn", -3, 3),
    ("erfc", torch.erfc, "randn", -3, 3),
    ("lgamma", torch.lgamma, "uniform", 0.2, 6),
    ("logit", torch.logit, "uniform", 0.05, 0.95),
]
for op, fn, kind, lo, hi in FLOAT_MATH:
    unary(op, fn, FLOAT_INT, kind=kind, low=lo, high=hi)

# Same dtype out; integers allowed, bool rejected (sign and square also take bool).
for op, fn, dtypes in [
    ("neg", torch.neg, NUMERIC),
    ("abs", torch.abs, NUMERIC + ("i8",)),
    ("floor", torch.floor, NUMERIC),
    ("ceil", torch.ceil, NUMERIC),
    ("trunc", torch.trunc, NUMERIC),
    ("round", torch.round, NUMERIC),
    ("relu", torch.relu, NUMERIC),
    ("relu6", F.relu6, NUMERIC + ("u8",)),
    ("hardtanh", F.hardtanh, NUMERIC),
    ("sign", torch.sign, NUMERIC + ("bool",)),
    ("square", torch.square, NUMERIC + ("bool",)),
    ("nan_to_num", torch.nan_to_num, NUMERIC + ("bool",)),
]:
    unary(op, fn, dtypes)

# Floating dtypes only.
for op, fn in [
    ("frac", torch.frac),
    ("silu", F.silu),
    ("mish", F.mish),
    ("selu", F.selu),
    ("hardswish", F.hardswish),
    ("hardsigmoid", F.hardsigmoid),
    ("log_sigmoid", F.logsigmoid),
    ("gelu", F.gelu),
    ("softplus", F.softplus),
    ("elu", F.elu),
    ("celu", F.celu),
    ("leaky_relu", F.leaky_relu),
]:
    unary(op, fn, FLOAT_LOW, low=-5, high=5)

# Bool results and bitwise_not.
for op, fn in [
    ("isnan", torch.isnan),
    ("isinf", torch.isinf),
    ("isposinf", torch.isposinf),
    ("isneginf", torch.isneginf),
    ("isfinite", torch.isfinite),
    ("signbit", torch.signbit),
    ("logical_not", torch.logical_not),
]:
    unary(op, fn, WITH_BOOL)
unary("bitwise_not", torch.bitwise_not, INTEGRAL)

# Attributes.
unary(
    "gelu", lambda x: F.gelu(x, approximate="tanh"), FLOAT_LOW, {"approximate": "tanh"}, name="tanh"
)
unary(
    "softplus",
    lambda x: F.softplus(x, beta=2.0, threshold=4.0),
    FLOAT_LOW,
    {"beta": 2.0, "threshold": 4.0},
    low=-5,
    high=5,
    kind="uniform",
    name="beta",
)
unary("elu", lambda x: F.elu(x, alpha=0.5), FLOAT_LOW, {"alpha": 0.5}, name="alpha")
unary("celu", lambda x: F.celu(x, alpha=2.0), FLOAT_LOW, {"alpha": 2.0}, name="alpha")
unary(
    "leaky_relu", lambda x: F.leaky_relu(x, 0.2), FLOAT_LOW, {"negative_slope": 0.2}, name="slope"
)
unary(
    "hardtanh",
    lambda x: F.hardtanh(x, -2.0, 2.0),
    FLOAT_INT,
    {"min_val": -2.0, "max_val": 2.0},
    name="range",
)
unary("round", lambda x: torch.round(x, decimals=2), FLOAT_LOW, {"decimals": 2}, name="dec2")
for shape, tag in (((7, 127), "odd"), ((), "0d")):
    CASES.append(
        OpCase(
            "round",
            lambda x: torch.round(x, decimals=-1),
            [Arg(shape, kind="uniform", low=-500, high=500)],
            {"decimals": -1},
            dtypes=("f32", "f64"),
            name=f"decneg-{tag}",
        )
    )

# ---- binary ----------------------------------------------------------------------------------


def binary(
    op: str,
    ref: Callable[..., Any],
    dtypes: tuple[str, ...],
    attrs: dict[str, Any] | None = None,
    a: tuple[str, float, float] = ("randn", -3, 3),
    b: tuple[str, float, float] = ("randn", -3, 3),
    scalar: Any = 2.5,
    name: str = "",
    **kw: Any,
) -> None:
    """Size-1 broadcasting, odd sizes, 0-d and empty operands, and a Python scalar operand."""
    pre = f"{name}-" if name else ""
    shapes = [
        ((4, 1), (1, 5), "bcast"),
        ((3, 127), (127,), "odd"),
        ((), (7,), "0d"),
        ((0, 3), (3,), "empty2d"),
    ]
    for sa, sb, tag in shapes:
        CASES.append(
            OpCase(
                op,
                ref,
                [_arg(sa, *a), _arg(sb, *b)],
                dict(attrs or {}),
                dtypes=dtypes,
                name=pre + tag,
                **kw,
            )
        )
    if scalar is not None:
        CASES.append(
            OpCase(
                op,
                ref,
                [_arg((7,), *a), Arg(scalar=scalar)],
                dict(attrs or {}),
                dtypes=dtypes,
                name=pre + "pyscalar",
                **kw,
            )
        )


POS = ("positive", 0.5, 3)  # divisors: never zero (integer division by zero is an error)
NEG = ("uniform", -3, -0.5)  # negative divisors: floor / remainder signs

binary("add", torch.add, NUMERIC + ("f16",))
binary(
    "add",
    lambda x, y: torch.add(x, y, alpha=2),
    NUMERIC + ("bool",),
    {"alpha": 2},
    scalar=3,
    name="alpha",
)
binary("add", lambda x, y: torch.add(x, y, alpha=0.5), FLOAT_LOW, {"alpha": 0.5}, name="falpha")
binary("sub", torch.sub, NUMERIC + ("f16",))
binary("sub", lambda x, y: torch.sub(x, y, alpha=3), NUMERIC, {"alpha": 3}, scalar=2, name="alpha")
binary("mul", torch.mul, NUMERIC + ("bool", "f16"))
binary("mul", torch.mul, ("i32", "bool", "u8"), scalar=3, name="int")
binary("div", torch.div, FLOAT_INT + ("f16",), b=POS)
binary("div", torch.div, FLOAT_INT, b=NEG, scalar=-1.5, name="neg")
for mode in ("trunc", "floor"):
    binary(
        "div",
        lambda x, y, m=mode: torch.div(x, y, rounding_mode=m),
        NUMERIC,
        {"rounding_mode": mode},
        b=POS,
        scalar=2,
        name=mode,
    )
    binary(
        "div",
        lambda x, y, m=mode: torch.div(x, y, rounding_mode=m),
        NUMERIC,
        {"rounding_mode": mode},
        b=NEG,
        scalar=-2,
        name=f"{mode}-neg",
    )
for op, fn in [
    ("floor_divide", torch.floor_divide),
    ("remainder", torch.remainder),
    ("fmod", torch.fmod),
]:
    binary(op, fn, NUMERIC, b=POS, scalar=2)
    binary(op, fn, NUMERIC, b=NEG, scalar=-1.5, name="neg")
binary("pow", torch.pow, FLOAT_LOW, a=("positive", 0.1, 3), b=("uniform", -2, 2))
binary(
    "pow", torch.pow, ("i32", "i64", "u8"), a=("int", -3, 4), b=("int", 0, 4), scalar=2, name="int"
)
binary(
    "pow", torch.pow, ("f32", "i32"), a=("randn", -3, 3), b=("int", -2, 3), scalar=3, name="intexp"
)
CASES.append(
    OpCase(
        "pow",
        torch.pow,
        [Arg(scalar=2), Arg((7,), kind="int", low=0, high=6)],
        dtypes=("f32", "i32"),
        name="scalarbase",
    )
)
CASES.append(
    OpCase(
        "pow",
        torch.pow,
        [Arg((3, 127), kind="positive"), Arg(scalar=0.5)],
        dtypes=("f32", "bf16", "i32"),
        name="sqrt",
    )
)


def _tensor_other(fn: Callable[..., Any]) -> Callable[..., Any]:
    """torch.atan2/hypot take tensors only: a Python float becomes a 0-d f32 tensor, which
    promotes the same way here (float category, below dimensioned tensors)."""
    return lambda x, y: fn(x, y if isinstance(y, torch.Tensor) else torch.tensor(y))


binary("atan2", _tensor_other(torch.atan2), FLOAT_INT + ("f16",))
binary("hypot", _tensor_other(torch.hypot), FLOAT_LOW)
binary("copysign", torch.copysign, FLOAT_INT)
binary("xlogy", torch.xlogy, FLOAT_INT, b=("positive", 0.1, 3))
for op, fn in [
    ("maximum", torch.maximum),
    ("minimum", torch.minimum),
    ("fmax", torch.fmax),
    ("fmin", torch.fmin),
]:
    # torch's maximum/minimum take tensors only; the scalar operand is a 0-d tensor there.
    binary(op, fn, WITH_BOOL, scalar=None)
for op, fn in [
    ("eq", torch.eq),
    ("ne", torch.ne),
    ("lt", torch.lt),
    ("le", torch.le),
    ("gt", torch.gt),
    ("ge", torch.ge),
]:
    binary(op, fn, WITH_BOOL + ("i64",), a=("int", -2, 2), b=("int", -2, 2), scalar=0.5)
    binary(op, fn, ("f32", "bf16"), name="randn", scalar=None)
for op, fn in [
    ("logical_and", torch.logical_and),
    ("logical_or", torch.logical_or),
    ("logical_xor", torch.logical_xor),
]:
    binary(op, fn, ("f32", "i32", "bool"), a=("int", -1, 2), b=("int", -1, 2), scalar=None)
for op, fn in [
    ("bitwise_and", torch.bitwise_and),
    ("bitwise_or", torch.bitwise_or),
    ("bitwise_xor", torch.bitwise_xor),
]:
    binary(op, fn, INTEGRAL + ("i8",), a=("int", -50, 50), b=("int", -50, 50), scalar=3)

# Mixed dtypes: promotion between tensors and 0-d tensors.
for op, fn in [
    ("add", torch.add),
    ("mul", torch.mul),
    ("maximum", torch.maximum),
    ("lt", torch.lt),
]:
    CASES.append(
        OpCase(op, fn, [Arg((4, 7), dtype="i32"), Arg((4, 7), dtype="bf16")], name="mix-i32-bf16")
    )
    CASES.append(
        OpCase(op, fn, [Arg((4, 7), dtype="f16"), Arg((), dtype="f64")], name="mix-f16-0d")
    )
    CASES.append(
        OpCase(
            op,
            fn,
            [
                Arg((4, 7), dtype="u8", kind="int", low=0, high=9),
                Arg((7,), dtype="i8", kind="int", low=-9, high=9),
            ],
            name="mix-u8-i8",
        )
    )
CASES.append(
    OpCase("add", torch.add, [Arg((4, 7), dtype="bool"), Arg(scalar=2)], name="mix-bool-int")
)
CASES.append(
    OpCase(
        "div",
        torch.div,
        [Arg((4, 7), dtype="i64"), Arg((7,), dtype="i32", kind="positive")],
        name="mix-int-true",
    )
)


# Two Python scalars: Python semantics and a Python scalar result.
def _scalars(
    op: str, ref: Callable[..., Any], a: Any, b: Any, name: str, attrs: dict[str, Any] | None = None
) -> None:
    CASES.append(
        OpCase(op, ref, [Arg(scalar=a), Arg(scalar=b)], dict(attrs or {}), name=f"py-{name}")
    )


_scalars("add", lambda a, b: a + b, 7, 2, "int")
_scalars("add", lambda a, b: a + b, 7, 2.5, "float")
_scalars("add", lambda a, b: a + 3 * b, 7, 2, "alpha", {"alpha": 3})
_scalars("sub", lambda a, b: a - b, 2, 7, "int")
_scalars("mul", lambda a, b: a * b, 6, -4, "int")
_scalars("mul", lambda a, b: a * b, 1.5, 4, "float")
_scalars("div", lambda a, b: a / b, 7, 2, "int")
_scalars("div", lambda a, b: a // b, -7, 2, "floor", {"rounding_mode": "floor"})
_scalars("floor_divide", lambda a, b: a // b, -7, 2, "int")
_scalars("floor_divide", lambda a, b: a // b, 7.5, -2, "float")
_scalars("remainder", lambda a, b: a % b, -7, 3, "int")
_scalars("remainder", lambda a, b: a % b, 7.5, -2.0, "float")
_scalars("pow", lambda a, b: a**b, 3, 4, "int")
_scalars("pow", lambda a, b: a**b, 2.0, 0.5, "float")
_scalars("lt", lambda a, b: a < b, 2, 3.5, "mixed")
_scalars("eq", lambda a, b: a == b, 2, 2.0, "mixed")
_scalars("bitwise_and", lambda a, b: a & b, 6, 3, "int")
_scalars("bitwise_or", lambda a, b: a | b, True, False, "bool")

# ---- clamp, where, cast, lerp, addcmul, addcdiv -------------------------------------------------

unary(
    "clamp", lambda x: torch.clamp(x, -0.5, 0.5), FLOAT_INT, {"min": -0.5, "max": 0.5}, name="float"
)
unary(
    "clamp", lambda x: torch.clamp(x, -1, 1), NUMERIC + ("i8",), {"min": -1, "max": 1}, name="int"
)
unary("clamp", lambda x: torch.clamp(x, min=0.25), FLOAT_LOW, {"min": 0.25}, name="min")
unary("clamp", lambda x: torch.clamp(x, max=1), NUMERIC + ("u8",), {"max": 1}, name="max")
unary(
    "clamp",
    lambda x: torch.clamp(x, 1.0, -1.0),
    ("f32",),
    {"min": 1.0, "max": -1.0},
    name="inverted",
)

for sc, sa, sb, tag in [
    ((4, 1), (1, 5), (4, 5), "bcast"),
    ((3, 127), (127,), (3, 1), "odd"),
    ((), (), (), "0d"),
    ((0, 3), (3,), (1,), "empty"),
]:
    CASES.append(
        OpCase(
            "where",
            torch.where,
            [Arg(sc, dtype="bool"), Arg(sa), Arg(sb)],
            dtypes=NUMERIC + ("f16", "bool"),
            name=tag,
        )
    )
CASES.append(
    OpCase(
        "where",
        torch.where,
        [Arg((7,), dtype="bool"), Arg((7,)), Arg(scalar=2.5)],
        dtypes=FLOAT_INT,
        name="scalar",
    )
)
CASES.append(
    OpCase(
        "where",
        torch.where,
        [Arg((7,), dtype="bool"), Arg(scalar=1), Arg(scalar=2)],
        name="scalars",
    )
)
CASES.append(
    OpCase(
        "where",
        torch.where,
        [Arg((7,), dtype="bool"), Arg((7,), dtype="i8"), Arg((7,), dtype="u8")],
        name="promote",
    )
)

for target, kind, lo, hi in [
    ("f32", "randn", -3, 3),
    ("bf16", "randn", -3, 3),
    ("f16", "randn", -3, 3),
    ("f64", "randn", -3, 3),
    ("i32", "uniform", -300, 300),
    ("i64", "uniform", -300, 300),
    ("i8", "uniform", -100, 100),
    ("u8", "uniform", 0, 250),
    ("bool", "randn", -3, 3),
]:
    tdt = {
        "f32": torch.float32,
        "bf16": torch.bfloat16,
        "f16": torch.float16,
        "f64": torch.float64,
        "i32": torch.int32,
        "i64": torch.int64,
        "i8": torch.int8,
        "u8": torch.uint8,
        "bool": torch.bool,
    }[target]
    unary(
        "cast",
        lambda x, d=tdt: x.to(d),
        ("f32", "bf16", "i32", "bool"),
        {"dtype": target},
        kind=kind,
        low=lo,
        high=hi,
        name=target,
    )

for shape, tag in (((3, 127), "odd"), ((), "0d"), ((0, 3), "empty")):
    for w in (0.3, 0.7):
        CASES.append(
            OpCase(
                "lerp",
                lambda s, e, w=w: torch.lerp(s, e, w),
                [Arg(shape), Arg(shape)],
                {"weight": w},
                dtypes=FLOAT_LOW,
                name=f"w{w}-{tag}",
            )
        )
CASES.append(
    OpCase(
        "lerp",
        torch.lerp,
        [Arg((4, 1)), Arg((1, 5)), Arg((4, 5), kind="uniform", low=0, high=1)],
        dtypes=FLOAT_LOW,
        name="tensorw",
    )
)
CASES.append(
    OpCase(
        "lerp",
        torch.lerp,
        [Arg((7,)), Arg((7,)), Arg(scalar=0.25)],
        dtypes=FLOAT_LOW,
        name="scalarw",
    )
)

for op, fn, dtypes, c in [
    ("addcmul", torch.addcmul, NUMERIC, ("randn", -3, 3)),
    ("addcdiv", torch.addcdiv, FLOAT_LOW, ("positive", 0.5, 3)),
]:
    for sa, sb, sc, tag in [
        ((4, 1), (1, 5), (4, 5), "bcast"),
        ((3, 127), (127,), (3, 1), "odd"),
        ((), (), (), "0d"),
        ((0, 3), (3,), (1,), "empty"),
    ]:
        CASES.append(OpCase(op, fn, [Arg(sa), Arg(sb), _arg(sc, *c)], dtypes=dtypes, name=tag))
        CASES.append(
            OpCase(
                op,
                lambda x, y, z, f=fn: f(x, y, z, value=2),
                [Arg(sa), Arg(sb), _arg(sc, *c)],
                {"value": 2},
                dtypes=dtypes,
                name=f"value-{tag}",
            )
        )
CASES.append(
    OpCase(
        "addcdiv",
        lambda x, y, z: torch.addcdiv(x, y, z, value=0.5),
        [Arg((7,), dtype="i32"), Arg((7,)), Arg((7,), dtype="i32", kind="positive")],
        {"value": 0.5},
        dtypes=("f32",),
        name="mixed",
    )
)
