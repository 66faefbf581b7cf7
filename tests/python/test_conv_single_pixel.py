"""A grouped convolution whose whole output is one pixel, with a per-channel epilogue (batch
norm folded into multiply-add post-ops) and the channels-last layout (a convolution follows):
oneDNN 2.6's channels-last depthwise kernel got it wrong (0.2-0.8 relative error, MobileViT's
last stage at small images), so such a convolution runs in the blocked layout. Values against
eager."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import xjit


def _batch_norm(c: int) -> nn.BatchNorm2d:
    bn = nn.BatchNorm2d(c)
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.2, 0.2)
        bn.running_mean.uniform_(-0.2, 0.2)
        bn.running_var.uniform_(0.5, 1.5)
    return bn.eval()


@pytest.mark.parametrize(
    "channels,groups,size,stride,batch",
    [
        (32, 32, 2, 2, 1),  # one output pixel: was wrong
        (48, 48, 3, 3, 1),
        (17, 17, 2, 2, 1),
        (64, 16, 2, 2, 1),
        (32, 32, 2, 2, 2),  # one pixel per image, two images
        (32, 32, 6, 2, 1),  # 3x3 pixels
        (32, 1, 2, 2, 1),  # ungrouped
    ],
)
def test_grouped_conv_with_epilogue_matches_eager(
    channels: int, groups: int, size: int, stride: int, batch: int
) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(channels, channels, 3, stride, 1, groups=groups, bias=False),
        _batch_norm(channels),
        nn.SiLU(),
        nn.Conv2d(channels, 8, 1, bias=False),
    ).eval()
    x = torch.randn(batch, channels, size, size)
    with torch.no_grad():
        want = model(x)
        got = xjit.jit(model)(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * want.abs().max().item())
