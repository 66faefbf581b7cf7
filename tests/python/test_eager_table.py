"""The eager backend's op table (python/xjit/_eager.py: IR op -> PyTorch call) checked row by
row against the differential op table (tests/python/optable/*.py): every case (one test per
op), on its first dtype with contiguous operands, runs through ``_eager.run_op`` and must match the case's own
PyTorch expression. Result types come from the reference interpreter's run of the same case (the
walker passes the graph's declared types). Ops the eager table leaves to the interpreter
(NotImplemented) are skipped, as are cases the interpreter itself fails (known_failures.txt)."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
eager = pytest.importorskip("xjit._eager")
from test_ops import (  # noqa: E402
    KNOWN,
    REGISTERED,
    TORCH_DTYPES,
    Variant,
    _ref_copy,
    assert_close,
    flatten,
    load_cases,
    make_operands,
)

from xjit import ir  # noqa: E402

DTYPE_NAMES = {v: k for k, v in TORCH_DTYPES.items()}
CASES = [c for c in load_cases() if c.op in REGISTERED]
OPS = sorted({c.op for c in CASES})


def type_str(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"{DTYPE_NAMES[value.dtype]}[{','.join(str(d) for d in value.shape)}]"
    return {bool: "bool", int: "int", float: "float", type(None): "none"}.get(type(value), "object")


def check_case(case: Any) -> bool:
    """Runs one case; False when the eager table leaves its op to the interpreter."""
    v = Variant(case, case.dtypes[0], "contig")
    if v.id in KNOWN:
        return True  # a known failure of the reference interpreter: no result types to use
    operands = make_operands(v)
    ref_operands = [_ref_copy(x) for x in operands]
    interp_operands = [_ref_copy(x) for x in operands]
    results = ir.run_op(case.op, interp_operands, dict(case.attrs), framework="torch")
    types = [type_str(r) for r in results]
    got = eager.run_op(case.op, operands, dict(case.attrs), types)
    if got is NotImplemented:
        return False
    got = [got] if len(types) == 1 else list(got)
    expected = flatten(case.ref(*ref_operands))
    actual = flatten(got)
    assert len(actual) == len(expected), f"{v.id}: {len(actual)} results, expected {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert_close(a, e, case, f"{v.id} output {i}")
    return True


@pytest.mark.parametrize("op", OPS)
def test_eager_row_matches_pytorch(op: str) -> None:
    ran = [check_case(c) for c in CASES if c.op == op]
    if not any(ran):
        pytest.skip(f"'{op}' runs in the reference interpreter under backend='eager'")


def test_every_op_the_frontend_emits_has_a_row() -> None:
    """The ops torch_ops.cpp lowers to, apart from those the walker handles itself (constants,
    external calls, regions) or leaves to the interpreter on purpose (random dropout)."""
    walker = {"constant", "external_call", "if", "loop", "fusion", "custom_vjp", "return", "yield"}
    collectives = {"all_gather", "all_reduce", "broadcast", "reduce_scatter", "barrier"}
    missing = sorted(set(ir.ops()) - set(eager.TABLE) - walker - collectives - {"wait_tensor"})
    assert missing == [], missing
