"""The runtime's default pipeline runs chains of convolutions channels-last (the `layout` pass:
oneDNN's NHWC kernels with no reorder between convs, docs/perf.md session 4), with a batch norm's
scale and shift, a residual add, relu and max pooling in the chain, and gives PyTorch's values."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import xjit
import xjit.ir as ir

BLOCK = """
graph @block(%x: f32[2,16,12,12], %w1: f32[16,16,3,3], %w2: f32[16,16,3,3], %s: f32[16,1,1],
             %t: f32[16,1,1]) -> (f32[2,16,6,6]) {
  %c1 = conv2d(%x, %w1) {padding = [1, 1]} : f32[2,16,12,12]
  %m = mul(%c1, %s) : f32[2,16,12,12]
  %a = add(%m, %t) : f32[2,16,12,12]
  %r = relu(%a) : f32[2,16,12,12]
  %c2 = conv2d(%r, %w2) {padding = [1, 1]} : f32[2,16,12,12]
  %sum = add(%c2, %x) : f32[2,16,12,12]
  %y = relu(%sum) : f32[2,16,12,12]
  %p = max_pool2d(%y) {kernel_size = [2, 2], stride = [2, 2]} : f32[2,16,6,6]
  return(%p)
}"""


def _eager(x, w1, w2, s, t):  # type: ignore[no-untyped-def]
    r = torch.relu(F.conv2d(x, w1, padding=1) * s + t)
    return F.max_pool2d(torch.relu(F.conv2d(r, w2, padding=1) + x), 2)


def test_default_pipeline_runs_the_chain_channels_last() -> None:
    cg = ir.compile(ir.parse(BLOCK))  # the runtime's default pipeline
    text = str(cg.graph)
    assert text.count('layout = "nhwc"') == 3, text  # both convs and the pool
    g = torch.Generator().manual_seed(0)
    ins = [
        torch.randn(2, 16, 12, 12, generator=g),
        torch.randn(16, 16, 3, 3, generator=g) * 0.1,
        torch.randn(16, 16, 3, 3, generator=g) * 0.1,
        torch.rand(16, 1, 1, generator=g) + 0.5,
        torch.randn(16, 1, 1, generator=g),
    ]
    (got,) = cg.run(ins, framework="torch")
    torch.testing.assert_close(torch.as_tensor(got), _eager(*ins), rtol=1e-5, atol=1e-5)


class TwoConvs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)
        self.c2 = nn.Conv2d(16, 16, 3, padding=1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(self.c1(x)))
        return (self.c2(y) + y).mean((2, 3))


def test_module_through_xjit_jit() -> None:
    torch.manual_seed(1)
    model = TwoConvs().eval()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-1, 1)
        model.bn.running_var.uniform_(0.5, 2)
        compiled = xjit.jit(model, fullgraph=True)
        for n in (1, 3):
            x = torch.randn(n, 3, 10, 10)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
