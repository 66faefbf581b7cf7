"""Weight-bound convolutions (large weights, few output pixels: ResNet's last stage at batch 1)
run as im2col + a matmul that reads the OIHW weights as they are, instead of reordering the
weights into oneDNN's blocked layout on every call (docs/backend.md). Values against eager."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import xjit
import xjit.ir as ir


def _second_call(
    model: nn.Module, x: torch.Tensor, **options: bool
) -> tuple[torch.Tensor, dict[str, int]]:
    """The compiled model's second call (the first compiles) and how it moved the weight counters."""
    fn = xjit.jit(model, **options)
    keys = ("weights_in_place", "weight_reorders")
    with torch.no_grad():
        fn(x)
        before = ir.backend_stats()
        got = fn(x)
    after = ir.backend_stats()
    return got, {k: after[k] - before[k] for k in keys}


class LastStage(nn.Module):
    """ResNet-18's 512-channel 3x3 conv at 7x7 (9.4 MB of weights, 0.1 MB of pixels) + relu;
    with `chain`, two of them (the `layout` pass then runs them channels-last)."""

    def __init__(self, chain: bool = False) -> None:
        super().__init__()
        self.conv = nn.Conv2d(512, 512, 3, padding=1, bias=False)
        self.conv2 = nn.Conv2d(512, 512, 3, padding=1) if chain else None  # with a bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(x))
        return y if self.conv2 is None else torch.relu(self.conv2(y))


@pytest.mark.parametrize("chain", [False, True], ids=["channels-first", "channels-last-chain"])
def test_weight_bound_conv_reads_weights_in_place(chain: bool) -> None:
    torch.manual_seed(0)
    model = LastStage(chain).eval()
    x = torch.randn(1, 512, 7, 7)
    got, moved = _second_call(model, x)
    assert moved == {"weights_in_place": 2 if chain else 1, "weight_reorders": 0}
    torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-4)


def test_weight_cache_keeps_the_blocked_convolution() -> None:
    # With the opt-in cache the weight is reordered once and reused: better than in place.
    torch.manual_seed(1)
    model = LastStage().eval()
    x = torch.randn(1, 512, 7, 7)
    got, moved = _second_call(model, x, weight_cache=True)
    assert moved["weights_in_place"] == 0
    torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-4)


def test_activation_bound_conv_stays_blocked() -> None:
    torch.manual_seed(2)
    conv = nn.Conv2d(16, 16, 3, padding=1).eval()
    x = torch.randn(2, 16, 20, 20)
    got, moved = _second_call(conv, x)
    assert moved == {"weights_in_place": 0, "weight_reorders": 1}
    torch.testing.assert_close(got, conv(x), rtol=1e-5, atol=1e-5)


# Every geometry the im2col path takes, forced on (XJIT_CONV_IM2COL=1 is read once per process):
# each case alone (channels-first, no bias: that form has no fast per-row bias) and after a
# 3x3 conv (the `layout` pass then runs both channels-last, with the case's bias).
_FORCED = textwrap.dedent("""
    import torch, torch.nn.functional as F, xjit, xjit.ir as ir
    torch.manual_seed(0)
    cases = [  # (input shape, weight shape, bias, stride, padding, relu)
        ((1, 8, 9, 9), (12, 8, 3, 3), False, 1, 1, False),
        ((2, 8, 9, 7), (12, 8, 3, 3), True, 2, 1, True),
        ((1, 5, 11, 11), (7, 5, 5, 5), True, 1, 2, False),
        ((1, 6, 10, 10), (4, 6, 3, 1), False, (2, 1), (1, 0), True),
        ((1, 6, 10, 10), (4, 6, 1, 1), True, 2, 0, False),
        ((6, 10, 10), (4, 6, 3, 3), True, 1, 1, True),  # unbatched
        ((1, 6, 8, 8), (4, 6, 3, 3), False, 1, "same", False),
    ]
    checked = 0
    for i, (xs, ws, bias, stride, padding, relu) in enumerate(cases):
        x, w = torch.randn(*xs), torch.randn(*ws) * 0.2
        w0 = torch.randn(ws[1], ws[1], 3, 3) * 0.2
        b = torch.randn(ws[0]) if bias else None
        src = (
            "def alone(x, w):\\n    y = F.conv2d(x, w, None, %r, %r)\\n    return torch.relu(y) if %r else y\\n"
            "def chain(x, w0, w, b):\\n    y = F.conv2d(torch.relu(F.conv2d(x, w0, padding=1)), w, b, %r, %r)\\n"
            "    return torch.relu(y) if %r else y\\n"
        ) % (stride, padding, relu, stride, padding, relu)
        ns = {"F": F, "torch": torch}
        exec(src, ns)
        for name, args, calls in (("alone", (x, w), 1), ("chain", (x, w0, w, b), 2)):
            before = ir.backend_stats()["weights_in_place"]
            got = xjit.jit(ns[name])(*args)
            assert ir.backend_stats()["weights_in_place"] - before == calls, (i, name)
            torch.testing.assert_close(got, ns[name](*args), rtol=1e-5, atol=1e-5, msg=f"{i} {name}")
            checked += 1
    print("ok", checked)
    """)


def test_forced_im2col_matches_eager_on_every_geometry() -> None:
    env = dict(os.environ, XJIT_CONV_IM2COL="1", PYTHONPATH=str(Path(xjit.__file__).parent.parent))
    out = subprocess.run(
        [sys.executable, "-c", _FORCED], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "ok 14" in out.stdout, out.stdout + out.stderr[-3000:]
