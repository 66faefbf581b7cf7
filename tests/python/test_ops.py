"""Differential op tests: every row of the op table (tests/python/optable/*.py) runs through the
reference interpreter (xjit.ir.run_op) and is compared with PyTorch eager, per dtype, on
contiguous inputs and on non-contiguous views of the same values.

Tolerances (by output dtype, torch.testing style |actual - expected| <= atol + rtol * |expected|):
f32 rtol 1e-5 atol 1e-6; f64 rtol 1e-7 atol 1e-7; f16/bf16 rtol 1e-2 atol 1e-2 (kernels compute
in double and round once, torch rounds intermediates); integers and bool exactly. A row's
rtol/atol override these. NaN positions must agree, infinities must be equal, and dtype and shape
must agree exactly.

Cases listed in known_failures.txt run as strict xfails: one that starts passing fails the run
(regenerate the list with `python tests/python/update_known_failures.py`). Rows whose op is not
registered are skipped and counted in the summary.
"""

from __future__ import annotations

import importlib
import math
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from optable.spec import Arg, OpCase
from xjit import ir

OPTABLE = Path(__file__).parent / "optable"
KNOWN_FAILURES = Path(__file__).parent / "known_failures.txt"

TORCH_DTYPES: dict[str, torch.dtype] = {
    "f64": torch.float64,
    "f32": torch.float32,
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "i64": torch.int64,
    "i32": torch.int32,
    "i16": torch.int16,
    "i8": torch.int8,
    "u8": torch.uint8,
    "bool": torch.bool,
}

TOLERANCES: dict[torch.dtype, tuple[float, float]] = {  # (rtol, atol)
    torch.float32: (1e-5, 1e-6),
    torch.float64: (1e-7, 1e-7),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (1e-2, 1e-2),
}


# ---- collection ------------------------------------------------------------------------------


def load_cases() -> list[OpCase]:
    """Every CASES row of optable/*.py (spec.py excluded), in file order."""
    cases: list[OpCase] = []
    for path in sorted(OPTABLE.glob("*.py")):
        if path.stem in ("spec", "__init__"):
            continue
        module = importlib.import_module(f"optable.{path.stem}")
        rows = getattr(module, "CASES", None)
        if rows is None:
            raise RuntimeError(f"{path}: defines no CASES")
        cases.extend(rows)
    return cases


@dataclass(frozen=True)
class Variant:
    case: OpCase
    dtype: str
    layout: str  # "contig" or "noncontig"

    @property
    def id(self) -> str:
        return f"{self.case.id}-{self.dtype}-{self.layout}"


def _has_noncontig_operand(case: OpCase) -> bool:
    return any(
        a.shape is not None and len(a.shape) >= 1 and math.prod(a.shape) > 1 for a in case.args
    )


def variants(cases: list[OpCase]) -> list[Variant]:
    out: list[Variant] = []
    for case in cases:
        for dtype in case.dtypes:
            out.append(Variant(case, dtype, "contig"))
            if case.noncontig and _has_noncontig_operand(case):
                out.append(Variant(case, dtype, "noncontig"))
    ids = [v.id for v in out]
    dups = sorted({i for i in ids if ids.count(i) > 1})
    if dups:
        raise RuntimeError(f"duplicate op-table case ids (give rows distinct names): {dups}")
    return out


def read_known_failures() -> set[str]:
    if os.environ.get("XJIT_IGNORE_KNOWN_FAILURES") or not KNOWN_FAILURES.exists():
        return set()
    lines = (ln.split("#", 1)[0].strip() for ln in KNOWN_FAILURES.read_text().splitlines())
    return {ln for ln in lines if ln}


VARIANTS = variants(load_cases())
KNOWN = read_known_failures()
REGISTERED = set(ir.ops())


def _params() -> Iterator[Any]:
    for v in VARIANTS:
        marks = (
            [pytest.mark.xfail(strict=True, reason="listed in known_failures.txt")]
            if v.id in KNOWN
            else []
        )
        yield pytest.param(v, id=v.id, marks=marks)


# ---- inputs ----------------------------------------------------------------------------------


def _int_range(arg: Arg, dtype: torch.dtype) -> tuple[int, int]:
    lo, hi = math.ceil(arg.low), math.ceil(arg.high)
    if arg.kind == "positive":
        lo = max(lo, 1)
    if dtype == torch.uint8:
        lo = max(lo, 0)
    return lo, max(hi, lo + 1)


def make_tensor(arg: Arg, dtype_name: str, gen: torch.Generator) -> torch.Tensor:
    assert arg.shape is not None
    shape = tuple(arg.shape)
    if arg.kind in ("index", "perm"):
        dtype = TORCH_DTYPES[arg.dtype or "i64"]
        high = int(arg.high)
        if arg.kind == "index":
            return torch.randint(0, high, shape, generator=gen).to(dtype)
        n = math.prod(shape)
        if n > high:
            raise ValueError(f"perm arg of shape {shape} needs high >= {n}, got {high}")
        return torch.randperm(high, generator=gen)[:n].reshape(shape).to(dtype)
    dtype = TORCH_DTYPES[arg.dtype or dtype_name]
    if arg.kind == "bool" or dtype == torch.bool:
        return (torch.rand(shape, generator=gen) < 0.5).to(dtype)
    if arg.kind == "int" or not dtype.is_floating_point:
        lo, hi = _int_range(arg, dtype)
        return torch.randint(lo, hi, shape, generator=gen).to(dtype)
    if arg.kind == "randn":
        values = torch.randn(shape, generator=gen, dtype=torch.float64)
    elif arg.kind == "uniform":
        values = arg.low + (arg.high - arg.low) * torch.rand(
            shape, generator=gen, dtype=torch.float64
        )
    elif arg.kind == "positive":
        values = 0.1 + (arg.high - 0.1) * torch.rand(shape, generator=gen, dtype=torch.float64)
    else:
        raise ValueError(f"unknown Arg kind {arg.kind!r}")
    return values.to(dtype)


def _sentinel(dtype: torch.dtype) -> float | int | bool:
    """Fills the gaps of non-contiguous buffers so that reading them shows up in the result."""
    if dtype.is_floating_point:
        return math.nan
    return True if dtype == torch.bool else 101


def noncontiguous(t: torch.Tensor) -> torch.Tensor:
    """The same values in a view with non-unit strides: the last dim strided by 2 over a buffer
    whose gaps hold a sentinel, and for rank >= 2 the last two dims transposed in memory."""
    if t.dim() == 0 or t.numel() <= 1:
        return t
    shape = list(t.shape)
    if t.dim() >= 2:
        base = torch.full(
            shape[:-2] + [shape[-1], 2 * shape[-2]], _sentinel(t.dtype), dtype=t.dtype
        )
        view = base[..., ::2].transpose(-1, -2)
    else:
        base = torch.full([2 * shape[0]], _sentinel(t.dtype), dtype=t.dtype)
        view = base[::2]
    view.copy_(t)
    assert not view.is_contiguous() and torch.equal(view, t)
    return view


def make_operands(v: Variant) -> list[Any]:
    gen = torch.Generator().manual_seed(zlib.crc32(f"{v.case.id}-{v.dtype}".encode()))
    return [make_tensor(a, v.dtype, gen) if a.shape is not None else a.scalar for a in v.case.args]


# ---- comparison ------------------------------------------------------------------------------


def flatten(x: Any) -> list[Any]:
    if isinstance(x, (list, tuple)):  # tuples include torch's named tuples (max.dim, sort...)
        return [e for item in x for e in flatten(item)]
    return [x]


def assert_close(actual: Any, expected: Any, case: OpCase, where: str) -> None:
    if isinstance(expected, torch.Tensor):
        assert isinstance(
            actual, torch.Tensor
        ), f"{where}: expected a tensor, got {type(actual).__name__}"
        assert (
            actual.dtype == expected.dtype
        ), f"{where}: dtype {actual.dtype}, expected {expected.dtype}"
        assert (
            actual.shape == expected.shape
        ), f"{where}: shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"
        if not expected.dtype.is_floating_point:
            mismatch = actual != expected
            assert not mismatch.any(), (
                f"{where}: {int(mismatch.sum())} of {expected.numel()} elements differ; "
                f"first at {tuple(mismatch.nonzero()[0].tolist())}: "
                f"{actual[mismatch][0].item()} vs expected {expected[mismatch][0].item()}"
            )
            return
        rtol, atol = TOLERANCES[expected.dtype]
        rtol = case.rtol if case.rtol is not None else rtol
        atol = case.atol if case.atol is not None else atol
        a, e = actual.double(), expected.double()
        nan_a, nan_e = a.isnan(), e.isnan()
        assert torch.equal(
            nan_a, nan_e
        ), f"{where}: NaN positions differ ({int(nan_a.sum())} vs expected {int(nan_e.sum())})"
        inf = e.isinf() | a.isinf()
        bad = (a[inf] != e[inf]).any() if inf.any() else False
        assert not bad, f"{where}: infinities differ"
        finite = ~(nan_e | inf)
        diff = (a - e).abs()
        tol = atol + rtol * e.abs()
        over = finite & (diff > tol)
        if over.any():
            idx = tuple(over.nonzero()[0].tolist())
            raise AssertionError(
                f"{where}: {int(over.sum())} of {e.numel()} elements exceed "
                f"rtol={rtol} atol={atol}; "
                f"max abs diff {diff[finite].max().item():.3g}; first at {idx}: "
                f"{a[idx].item()!r} vs expected {e[idx].item()!r}"
            )
        return
    # Python scalars (and None): same type; floats within f64 tolerance.
    assert type(actual) is type(expected), (
        f"{where}: got {type(actual).__name__} {actual!r}, "
        f"expected {type(expected).__name__} {expected!r}"
    )
    if isinstance(expected, float):
        rtol, atol = TOLERANCES[torch.float64]
        if math.isnan(expected):
            assert math.isnan(actual), f"{where}: {actual} vs expected nan"
        else:
            assert actual == expected or abs(actual - expected) <= atol + rtol * abs(
                expected
            ), f"{where}: {actual} vs expected {expected}"
    else:
        assert actual == expected, f"{where}: {actual!r} vs expected {expected!r}"


def _ref_copy(x: Any) -> Any:
    """Independent contiguous copies for the reference (in-place ops write their operands)."""
    return x.clone(memory_format=torch.contiguous_format) if isinstance(x, torch.Tensor) else x


@pytest.mark.parametrize("v", list(_params()))
def test_op(v: Variant, request: pytest.FixtureRequest) -> None:
    case = v.case
    request.node.user_properties += [("xjit_op", case.op), ("xjit_dtype", v.dtype)]
    if case.op not in REGISTERED:
        request.node.user_properties.append(("xjit_unregistered", True))
        pytest.skip(f"op '{case.op}' is not registered")
    operands = make_operands(v)
    ref_operands = [_ref_copy(x) for x in operands]
    if v.layout == "noncontig":
        operands = [noncontiguous(x) if isinstance(x, torch.Tensor) else x for x in operands]
    actual = flatten(ir.run_op(case.op, operands, dict(case.attrs), framework="torch"))
    expected = flatten(case.ref(*ref_operands))
    assert len(actual) == len(
        expected
    ), f"{len(actual)} outputs, the reference gives {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert_close(a, e, case, f"{v.id} output {i}")


def test_known_failures_are_current() -> None:
    """Every listed known failure names an existing case (the list is regenerated, not edited)."""
    stale = sorted(KNOWN - {v.id for v in VARIANTS})
    assert not stale, f"known_failures.txt lists ids that are not cases (regenerate it): {stale}"
