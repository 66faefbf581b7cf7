"""Eval-mode batch norm with run-time parameters (how a module's parameters reach the compiler)
through decompose-batch-norm, fuse, plan-memory: the batch norm becomes a per-channel scale and
shift in one native kernel with the residual add and relu (not conv post-ops: fuse_rules), and
the results match PyTorch's eval-mode conv + batch_norm (+ residual add + relu)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import xjit.ir as ir

GRAPH = """
graph @block(%x: f32[2,8,10,10], %w: f32[8,8,3,3], %g: f32[8], %b: f32[8], %m: f32[8], %v: f32[8])
    -> (f32[2,8,10,10]) {
  %c = conv2d(%x, %w) {padding = [1, 1]} : f32[2,8,10,10]
  %n = batch_norm(%c, %g, %b, %m, %v) {eps = 0.001} : f32[2,8,10,10]
  %r = add(%n, %x) : f32[2,8,10,10]
  %y = relu(%r) : f32[2,8,10,10]
  return(%y)
}"""


def _inputs(seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x, w = torch.randn(2, 8, 10, 10, generator=g), torch.randn(8, 8, 3, 3, generator=g) * 0.2
    gamma, beta = torch.randn(8, generator=g), torch.randn(8, generator=g)
    mean, var = torch.randn(8, generator=g), torch.rand(8, generator=g) + 0.1
    return [x, w, gamma, beta, mean, var]


def _eager(x, w, gamma, beta, mean, var):  # type: ignore[no-untyped-def]
    c = F.conv2d(x, w, padding=1)
    return torch.relu(F.batch_norm(c, mean, var, gamma, beta, training=False, eps=1e-3) + x)


PIPELINE = "decompose-batch-norm,fuse,plan-memory"  # as in the runtime's default pipeline


def test_batch_norm_becomes_native_scale_and_shift() -> None:
    cg = ir.compile(ir.parse(GRAPH), pipeline=PIPELINE)
    ops = str(cg.graph)
    assert "batch_norm" not in ops  # decomposed: no reference kernel over the activation
    assert cg.stats["reference_ops"] <= 4  # only the [C] -> [C,1,1] views may stay reference
    for seed in (0, 1):
        ins = _inputs(seed)
        (got,) = cg.run(ins, framework="torch")
        torch.testing.assert_close(torch.as_tensor(got), _eager(*ins), rtol=1e-5, atol=1e-5)


def test_parameters_read_per_call() -> None:
    """The scale and shift are computed from the parameters of each call, not cached."""
    cg = ir.compile(ir.parse(GRAPH), pipeline=PIPELINE)
    ins = _inputs(2)
    cg.run(ins, framework="torch")
    ins[5] = ins[5] * 4.0  # another running_var
    (got,) = cg.run(ins, framework="torch")
    torch.testing.assert_close(torch.as_tensor(got), _eager(*ins), rtol=1e-5, atol=1e-5)


RESIDUAL = """
graph @down(%x: f32[1,16,12,12], %w: f32[32,16,3,3], %wd: f32[32,16,1,1]) -> (f32[1,32,6,6]) {
  %c = conv2d(%x, %w) {padding = [1, 1], stride = [2, 2]} : f32[1,32,6,6]
  %d = conv2d(%x, %wd) {stride = [2, 2]} : f32[1,32,6,6]
  %r = add(%c, %d) : f32[1,32,6,6]
  %y = relu(%r) : f32[1,32,6,6]
  return(%y)
}"""


def test_residual_in_blocked_layout() -> None:
    """A full-shape residual post-op of a channels-first conv run in oneDNN's 16-channel
    blocked layout is reordered into that layout per call (docs/backend.md)."""
    cg = ir.compile(ir.parse(RESIDUAL), pipeline=PIPELINE)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(1, 16, 12, 12, generator=g)
    w, wd = torch.randn(32, 16, 3, 3, generator=g) * 0.1, torch.randn(32, 16, 1, 1, generator=g)
    (got,) = cg.run([x, w, wd], framework="torch")
    want = torch.relu(F.conv2d(x, w, padding=1, stride=2) + F.conv2d(x, wd, stride=2))
    torch.testing.assert_close(torch.as_tensor(got), want, rtol=1e-5, atol=1e-5)
    # the residual is the conv's post-op (the relu is applied after it)
    assert "1 post-ops" in "".join(text for _, text in cg.dump_files())
