"""Memory of compiled graphs: what a call allocates beyond its results.

Peak memory is the resident-set high-water mark (VmHWM), reset by writing 5 to
/proc/self/clear_refs, as bench/ measures it (docs/perf.md, memory section).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import xjit.ir as ir

ROWS, DIM = 65536, 256  # a 64 MiB f32 table, like a language model's word embeddings

EMBEDDING = f"""
graph @f(%w: f32[{ROWS},{DIM}], %i: i64[2,3]) -> (f32[2,3,{DIM}]) {{
  %y = embedding(%w, %i) : f32[2,3,{DIM}]
  return(%y)
}}"""


def _status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"{field} not in /proc/self/status")


def _peak_growth_mb(fn) -> float:
    """How far the resident set's high-water mark rises above the current RSS while fn runs."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pytest.skip("cannot reset the peak RSS here")
    before = _status_mb("VmRSS")
    fn()
    return _status_mb("VmHWM") - before


def test_embedding_does_not_copy_the_table() -> None:
    weight = torch.randn(ROWS, DIM)
    indices = torch.tensor([[0, 5, ROWS - 1], [7, 7, 1234]])
    compiled = ir.compile(ir.parse(EMBEDDING))
    (first,) = compiled(weight, indices)  # compiles and allocates the frame
    results = []
    growth = _peak_growth_mb(lambda: results.append(compiled(weight, indices)))
    (y,) = results[0]
    torch.testing.assert_close(y, torch.nn.functional.embedding(indices, weight), rtol=0, atol=0)
    torch.testing.assert_close(first, y, rtol=0, atol=0)
    # A copy of the table would add 64 MiB; rows are read in place.
    assert growth < 16, f"peak RSS rose {growth:.1f} MB during one call"


def test_embedding_of_strided_weights_matches_torch() -> None:
    indices = torch.tensor([[3, 0, 9], [1, 1, 4]])
    g = ir.parse(
        """
graph @f(%w: f32[10,6], %i: i64[2,3]) -> (f32[2,3,6]) {
  %y = embedding(%w, %i) : f32[2,3,6]
  return(%y)
}"""
    )
    base = torch.randn(6, 10)
    cases = {
        "transposed (rows not contiguous)": base.t(),
        "every other row": torch.randn(20, 6)[::2],
        "broadcast rows": torch.randn(1, 6).expand(10, 6),
    }
    for name, weight in cases.items():
        want = torch.nn.functional.embedding(indices, weight)
        (interp,) = ir.run(g, [weight, indices])
        (native,) = ir.compile(g)(weight, indices)
        torch.testing.assert_close(interp, want, rtol=0, atol=0, msg=name)
        torch.testing.assert_close(native, want, rtol=0, atol=0, msg=name)
