"""The CPU target's result buffers and the runtime's arena are not zero-filled (cpu_target.cpp,
hostBuffer): every kernel must write each element of its result. Calls whose results reuse the
freed, dirty buffers of earlier calls must still match the reference interpreter."""

from __future__ import annotations

import numpy as np
import pytest

ir = pytest.importorskip("xjit.ir")

# Reductions (which could accumulate into their result), a scan, a matmul with a bias and
# elementwise kernels; the graph's results are allocated per call, the rest lives in the arena.
TEXT = """
graph @f(%x: f32[64,96], %w: f32[48,96], %b: f32[48]) -> (f32[64], f32[64,1], f32[64,96], f32[64,48], f32[96]) {
  %e = exp(%x) : f32[64,96]
  %s = sum(%e) {dims = [1], keepdim = false} : f32[64]
  %m = amax(%x) {dims = [1], keepdim = true} : f32[64,1]
  %c = cumsum(%x) {dim = 1} : f32[64,96]
  %l = linear(%x, %w, %b) : f32[64,48]
  %r = relu(%l) : f32[64,48]
  %t = mean(%x) {dims = [0], keepdim = false} : f32[96]
  return(%s, %m, %c, %r, %t)
}"""


def test_results_do_not_depend_on_the_contents_of_reused_buffers() -> None:
    g = ir.parse(TEXT)
    cg = ir.compile(g)
    assert cg.stats["target_ops"] >= 3
    rng = np.random.default_rng(0)
    for scale in (1.0, -3.0, 0.5, 2.0):  # each call's results reuse the last call's freed ones
        xs = [
            (scale * rng.standard_normal((64, 96))).astype(np.float32),
            rng.standard_normal((48, 96), dtype=np.float32),
            rng.standard_normal(48, dtype=np.float32),
        ]
        got = cg(*xs)
        want = ir.run(g, xs)
        assert len(got) == len(want) == 5
        for a, b in zip(got, want):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-4)
        del got
