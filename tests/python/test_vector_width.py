"""The kernels' vector width (llvm_engine.cpp preferredVectorWidth): 512 bits on AVX-512 hosts,
LLVM's own choice elsewhere, `XJIT_VECTOR_WIDTH=256|512` to override (A/B runs). Each width
gives eager's values, and the width is part of the compile cache's key: a cache filled at one
width is not linked at another (its code would be the other width's)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_cached_program

pytest.importorskip("torch")

PROGRAM = """
import json, torch, xjit
from xjit import ir

def fn(x):
    return torch.softmax(x, -1) * torch.exp(-x).sum(-1, keepdim=True), torch.tanh(x) + 1

torch.manual_seed(0)
x = torch.randn(67, 300)
with torch.no_grad():
    got = xjit.jit(fn, fullgraph=True)(x)
    want = fn(x.double())
close = all(torch.allclose(g.double(), w, rtol=1e-5, atol=1e-6) for g, w in zip(got, want))
print(json.dumps({"close": close, **ir.backend_stats()}), flush=True)
"""


@pytest.mark.parametrize("width", ["256", "512"])
def test_each_width_gives_eagers_values_and_its_own_cache_entries(
    width: str, tmp_path: Path
) -> None:
    other = "512" if width == "256" else "256"
    first = run_cached_program(PROGRAM, tmp_path, XJIT_VECTOR_WIDTH=width)
    assert first["close"] and first["llvm_compilations"] > 0
    again = run_cached_program(PROGRAM, tmp_path, XJIT_VECTOR_WIDTH=width)
    assert again["close"] and again["llvm_compilations"] == 0 and again["cache_hits"] > 0
    switched = run_cached_program(PROGRAM, tmp_path, XJIT_VECTOR_WIDTH=other)
    assert switched["close"] and switched["llvm_compilations"] > 0
