"""Rows of the differential op table: each case names an IR op, its operands, attributes and
the PyTorch expression it must match. tests/python/test_ops.py runs every row over its dtypes,
plus a non-contiguous variant of every tensor operand, through the reference interpreter."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Arg:
    """One operand. A tensor when `shape` is given (dtype: `dtype` if fixed, else the case's
    dtype); otherwise the Python scalar `scalar`, or None for an absent optional operand.

    kind picks the values: "randn" (normal), "uniform" (low..high), "positive" (0.1..high),
    "int" (integers in [low, high)), "bool", "index" (integers in [0, high)), "perm" (a
    permutation-free unique index set in [0, high) of the given shape)."""

    shape: Shape | None = None
    dtype: str | None = None
    kind: str = "randn"
    low: float = -3.0
    high: float = 3.0
    scalar: Any = None


@dataclass
class OpCase:
    op: str
    ref: Callable[..., Any]  # called with the operands (torch tensors / scalars / None)
    args: Sequence[Arg]
    attrs: dict[str, Any] = field(default_factory=dict)  # IR attributes; dtypes as "f32" etc.
    dtypes: tuple[str, ...] = ("f32",)  # case dtype for tensor args without a fixed dtype
    name: str = ""  # distinguishes cases of one op: "broadcast", "0d", "empty", ...
    rtol: float | None = None  # override the per-dtype default
    atol: float | None = None
    noncontig: bool = True  # also run with non-contiguous views of every tensor operand

    @property
    def id(self) -> str:
        return f"{self.op}-{self.name}" if self.name else self.op


# Dtype groups used by rows.
FLOAT = ("f32", "f16", "bf16", "f64")
FLOAT_INT = ("f32", "bf16", "i32", "i64")
ALL = ("f32", "f16", "bf16", "f64", "i64", "i32", "i16", "i8", "u8", "bool")
