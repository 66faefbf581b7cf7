"""Accuracy of the mixed-precision pass on the op tests: every f32 row of the linalg and conv
tables (optable/linalg.py, optable/conv_pool.py) whose op the pass lowers runs as a one-op graph
before and after `xjit-opt --passes=mixed-precision{dtype=...}`; the error is normwise,
max|amp - f32| / max|f32| over the output, and the worst row per op is reported next to the
same measure for PyTorch's CPU autocast on the same inputs.

    python tests/python/test_amp_accuracy.py      # prints the table (docs/passes.md)
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import torch

from conftest import find_tool  # first: makes a development build's xjit importable
import xjit.ir as ir  # noqa: E402
from optable import conv_pool, linalg
from optable.spec import OpCase
from test_ops import make_tensor

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
import fx_import  # noqa: E402

COMPUTE_OPS = (
    "matmul mm bmm addmm baddbmm linear conv1d conv2d conv3d conv_transpose1d conv_transpose2d "
    "conv_transpose3d scaled_dot_product_attention"
).split()
LOW = {"bf16": torch.bfloat16, "f16": torch.float16}
# Bounds where torch has no CPU autocast for a dtype: a few units of the low dtype's rounding
# (2^-8 for bf16, 2^-11 for f16) relative to the output's magnitude.
BOUNDS = {"bf16": 2e-2, "f16": 3e-3}


def rows() -> list[OpCase]:
    return [c for c in linalg.CASES + conv_pool.CASES if c.op in COMPUTE_OPS and "f32" in c.dtypes]


def graph_text(case: OpCase, operands: list[Any], result: torch.Tensor) -> str:
    """A one-op graph: tensor operands are inputs, scalars and None are constants."""
    em = fx_import._Emitter(ir, "inputs", 0)
    info = ir.op_info(case.op)
    kinds = {a["name"]: a["kind"] for a in info["attrs"]}
    header, args = [], []
    for i, v in enumerate(operands):
        if isinstance(v, torch.Tensor):
            header.append(f"%a{i}: {fx_import._type_str(v)}")
            args.append(f"%a{i}")
        else:
            args.append(em.constant(v))
    attrs = ", ".join(
        f"{k} = {em.attr_text(kinds[k], v, k)}" for k, v in sorted(case.attrs.items())
    )
    attrs = f" {{{attrs}}}" if attrs else ""
    body = "\n".join(em.lines)
    return (
        f"graph @g({', '.join(header)}) -> ({fx_import._type_str(result)}) {{\n{body}\n"
        f"  %r = {case.op}({', '.join(args)}){attrs} : {fx_import._type_str(result)}\n"
        "  return(%r)\n}\n"
    )


def normwise(actual: torch.Tensor, expected: torch.Tensor) -> float:
    scale = expected.double().abs().max().item()
    return (actual.double() - expected.double()).abs().max().item() / scale if scale else 0.0


def lowered(text: str, dtype: str, tool: str) -> str:
    with tempfile.NamedTemporaryFile("w", suffix=".xir") as f:
        f.write(text)
        f.flush()
        r = subprocess.run(
            [tool, f.name, f"--passes=mixed-precision{{dtype={dtype}}}"],
            capture_output=True,
            text=True,
        )
    assert r.returncode == 0, r.stderr
    return r.stdout


def measure(tool: str) -> dict[str, dict[str, tuple[float, float | None, int]]]:
    """op -> dtype -> (worst xjit error, worst torch autocast error or None, rows)."""
    table: dict[str, dict[str, tuple[float, float | None, int]]] = defaultdict(dict)
    for case in rows():
        gen = torch.Generator().manual_seed(0)
        operands = [
            make_tensor(a, "f32", gen) if a.shape is not None else a.scalar for a in case.args
        ]
        expected = case.ref(*operands)
        if expected.numel() == 0:
            continue
        text = graph_text(case, operands, expected)
        (f32,) = ir.run(ir.parse(text), operands)
        for dtype, tdtype in LOW.items():
            amp_text = lowered(text, dtype, tool)
            assert f"{case.op}(" in amp_text and f": {dtype}[" in amp_text, amp_text
            (amp,) = ir.run(ir.parse(amp_text), operands)
            assert amp.dtype == torch.float32
            err = normwise(amp, f32)
            try:
                with torch.autocast("cpu", dtype=tdtype):
                    t = case.ref(*operands).float()
                terr: float | None = normwise(t, expected)
            except RuntimeError:
                terr = None
            old = table[case.op].get(dtype, (0.0, None, 0))
            worst_t = terr if old[1] is None else (old[1] if terr is None else max(old[1], terr))
            table[case.op][dtype] = (max(old[0], err), worst_t, old[2] + 1)
    return table


def markdown(table: dict[str, dict[str, tuple[float, float | None, int]]]) -> str:
    def fmt(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.1e}"

    lines = [
        "| op | rows | bf16: xjit | bf16: torch autocast | f16: xjit | f16: torch autocast |",
        "|---|---|---|---|---|---|",
    ]
    for op in COMPUTE_OPS:
        if op not in table:
            continue
        b, f = table[op]["bf16"], table[op]["f16"]
        lines.append(f"| {op} | {b[2]} | {fmt(b[0])} | {fmt(b[1])} | {fmt(f[0])} | {fmt(f[1])} |")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def opt_tool() -> str:
    tool = find_tool("xjit-opt")
    if tool is None:
        pytest.skip("xjit-opt not built")
    listed = subprocess.run([tool, "--list-passes"], capture_output=True, text=True).stdout
    if "mixed-precision" not in listed:
        pytest.skip("this xjit-opt has no mixed-precision pass")
    return tool


def test_mixed_precision_error_is_a_few_low_precision_ulps(opt_tool: str) -> None:
    table = measure(opt_tool)
    print("\n" + markdown(table))
    assert set(table) >= {"matmul", "linear", "conv2d", "conv_transpose2d", "baddbmm"}
    for op, by_dtype in table.items():
        for dtype, (err, torch_err, _) in by_dtype.items():
            # Lowered at all, and no worse than PyTorch's AMP (or a few ulps without it).
            bound = BOUNDS[dtype] if torch_err is None else 1.5 * torch_err + 1e-4
            assert 0 < err <= bound, f"{op} {dtype}: normwise error {err:.2e} > {bound:.2e}"


if __name__ == "__main__":
    tool = find_tool("xjit-opt")
    if tool is None:
        sys.exit("xjit-opt not built (set XJIT_BUILD_DIR)")
    print(markdown(measure(tool)))
