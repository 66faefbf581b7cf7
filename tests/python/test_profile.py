"""XJIT_PROFILE: a process with it set prints, at exit, the time per instruction kind of its
compiled graphs; without it nothing is printed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import xjit

SCRIPT = textwrap.dedent(
    """
    import numpy as np
    import xjit.ir as ir
    g = ir.parse('''
    graph @f(%x: f32[1,4,6,6], %w: f32[4,4,3,3]) -> (f32[1,6,6,4]) {
      %c = conv2d(%x, %w) {padding = [1, 1]} : f32[1,4,6,6]
      %r = relu(%c) : f32[1,4,6,6]
      %p = permute(%r) {dims = [0, 2, 3, 1]} : f32[1,6,6,4]
      %y = contiguous(%p) : f32[1,6,6,4]
      return(%y)
    }''')
    cg = ir.compile(g)
    x = np.ones((1, 4, 6, 6), np.float32)
    w = np.ones((4, 4, 3, 3), np.float32)
    for _ in range(7):
        cg.run([x, w])
    """
)


def _run(profile: str | None) -> str:
    path = [str(Path(xjit.__file__).parent.parent), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in path if p))
    env.pop("XJIT_PROFILE", None)
    if profile is not None:
        env["XJIT_PROFILE"] = profile
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


def _rows(report: str) -> dict[str, int]:
    """instruction label -> calls."""
    rows = {}
    for line in report.splitlines():
        parts = line.split(None, 4)
        if len(parts) == 5 and parts[2].isdigit():
            rows[parts[4]] = int(parts[2])
    return rows


def test_profile_by_kind() -> None:
    report = _run("1")
    assert "xjit profile" in report
    rows = _rows(report)
    assert rows.get("native fusion epilogue(conv2d+relu)") == 7, report
    assert rows.get("reference contiguous") == 7, report
    assert rows.get("reference permute") == 7, report


def test_profile_per_instruction() -> None:
    rows = _rows(_run("op"))
    conv = [label for label in rows if label.startswith("native fusion epilogue(conv2d+relu)")]
    # (the conv computes channels-last: sink-permutes moved the permute + contiguous after it
    # into it, so its result is f32[1,6,6,4])
    assert len(conv) == 1 and "f32[1,6,6,4]" in conv[0], rows
    assert rows[conv[0]] == 7


def test_no_profile_by_default() -> None:
    assert "xjit profile" not in _run(None)
    assert "xjit profile" not in _run("0")


def test_profile_api_in_process() -> None:
    """xjit.ir.profile / profile_report: counts only calls of graphs compiled after it."""
    import numpy as np

    import xjit.ir as ir

    g = ir.parse(
        """
    graph @f(%x: f32[64], %y: f32[64]) -> (f32[64]) {
      %a = mul(%x, %y) : f32[64]
      %b = exp(%a) : f32[64]
      return(%b)
    }"""
    )
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    try:
        ir.profile(1)
        cg = ir.compile(g)
        for _ in range(5):
            cg.run([x, x])
        rows = _rows(ir.profile_report())
        assert rows.get("native fusion elementwise(mul+exp)") == 5, rows
        ir.profile(1)  # resets the counters
        assert ir.profile_report() == ""
    finally:
        ir.profile(0)
