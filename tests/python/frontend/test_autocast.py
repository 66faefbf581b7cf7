"""Frames under CPU torch.autocast compile with eager autocast's semantics (docs/frontend.md,
"Autocast"): each listed op casts its floating arguments (lower_precision_fp to the autocast
dtype, fp32 to f32, promote to the widest), everything else follows type promotion; the state at
frame entry keys the compiled entry; `with torch.autocast(...)` blocks inside a frame change it.

Against eager autocast: the output dtypes exactly, and each output's normwise error against the
f32 run (max|out - f32| / max|f32|) within 1.5x eager autocast's own error, or one rounding unit
of the low dtype where eager's error is smaller (outputs that autocast leaves f32). Fused
elementwise kernels keep f32 intermediates where eager rounds after each op, as Inductor does.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("xjit._frontend")
import torch.nn.functional as F  # noqa: E402
import xjit  # noqa: E402
from frontend_fixtures import clean  # noqa: E402, F401 (autouse fixture)
from torch import nn  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
from bench.common import leaves  # noqa: E402
from bench.models import GPTBlock  # noqa: E402

LOW = {"bf16": torch.bfloat16, "f16": torch.float16}
UNIT = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}


def normwise(out: torch.Tensor, ref: torch.Tensor) -> float:
    scale = ref.double().abs().max().item()
    return (out.double() - ref.double()).abs().max().item() / (scale or 1.0)


def assert_like_eager_autocast(got: Any, amp: Any, f32: Any, low: torch.dtype) -> None:
    got_l, amp_l, f32_l = leaves(got), leaves(amp), leaves(f32)
    assert [t.dtype for t in got_l] == [t.dtype for t in amp_l]
    for g, a, r in zip(got_l, amp_l, f32_l, strict=True):
        bound = max(1.5 * normwise(a, r), UNIT[low])
        assert normwise(g, r) <= bound, (normwise(g, r), normwise(a, r))


def compile_under(
    fn: Callable[..., Any], args: tuple[Any, ...], low: torch.dtype | None
) -> tuple[xjit.ExplainReport, Any, Any]:
    """explain(fn) under autocast(low) (None: off), then a second call of the compiled fn, and
    eager's result under the same state."""
    ctx = torch.autocast("cpu", dtype=low) if low else torch.autocast("cpu", enabled=False)
    compiled = xjit.jit(fn)
    with torch.no_grad(), ctx, warnings.catch_warnings():
        warnings.simplefilter("error", xjit.XjitWarning)
        report = xjit.explain(fn)(*args)
        again = compiled(*args)
        want = fn(*args)
    return report, again, want


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.conv = nn.Conv2d(16, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)
        self.head = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = F.max_pool2d(self.stem(x), 2)
        y = torch.relu(self.bn(self.conv(y)) + y)
        feats = F.adaptive_avg_pool2d(y, 1).flatten(1)
        return self.head(feats), feats


def randomize_bn(m: nn.Module) -> None:
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.5, 0.5)
            mod.running_var.uniform_(0.5, 2.0)


@pytest.mark.parametrize("low", LOW.values(), ids=LOW.keys())
def test_mlp_with_promotion_and_fp32_ops(low: torch.dtype) -> None:
    torch.manual_seed(0)
    l1, l2 = nn.Linear(16, 32), nn.Linear(32, 16)
    norm = nn.LayerNorm(16)

    def f(x: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = F.gelu(l1(x))  # low: gelu rounds in the low dtype
        y = l2(h)  # low
        r = y + x  # low + f32 promotes to f32
        c = torch.cat([y, x], dim=1)  # promote: f32
        s = torch.softmax(y, dim=-1)  # low
        loss = F.mse_loss(y, target)  # fp32 list: f32
        return norm(r), c, s, loss, x @ l1.weight.t()

    x, target = torch.randn(8, 16), torch.randn(8, 16)
    report, again, want = compile_under(f, (x, target), low)
    assert report.graph_count == 1 and report.graph_break_count == 0, str(report)
    with torch.no_grad():
        f32 = f(x, target)
    assert [t.dtype for t in want] == [torch.float32, torch.float32, low, torch.float32, low]
    assert_like_eager_autocast(report.output, want, f32, low)
    assert_like_eager_autocast(again, want, f32, low)


@pytest.mark.parametrize("low", LOW.values(), ids=LOW.keys())
def test_transformer_block(low: torch.dtype) -> None:
    torch.manual_seed(0)
    block = GPTBlock(32, 4).eval()
    x = torch.randn(2, 8, 32)
    report, again, want = compile_under(block, (x,), low)
    assert report.graph_count == 1 and report.graph_break_count == 0, str(report)
    with torch.no_grad():
        f32 = block(x)
    assert_like_eager_autocast(report.output, want, f32, low)
    assert_like_eager_autocast(again, want, f32, low)


def test_hugging_face_bert() -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
    )
    bert = transformers.BertModel(config).eval()
    ids = torch.randint(0, 100, (2, 12))
    report, again, want = compile_under(bert, (ids,), torch.bfloat16)
    assert report.graph_count == 1 and report.graph_break_count == 0, str(report)
    with torch.no_grad():
        f32 = bert(ids)
    assert [t.dtype for t in leaves(want)] == [torch.float32, torch.bfloat16]  # pooler: linear
    assert_like_eager_autocast(report.output, want, f32, torch.bfloat16)
    assert_like_eager_autocast(again, want, f32, torch.bfloat16)


@pytest.mark.parametrize("low", LOW.values(), ids=LOW.keys())
def test_conv_net(low: torch.dtype) -> None:
    torch.manual_seed(0)
    net = ConvNet().eval()
    randomize_bn(net)
    x = torch.randn(2, 3, 16, 16)
    report, again, want = compile_under(net, (x,), low)
    assert report.graph_count == 1 and report.graph_break_count == 0, str(report)
    with torch.no_grad():
        f32 = net(x)
    assert [t.dtype for t in want] == [low, low]
    assert_like_eager_autocast(report.output, want, f32, low)
    assert_like_eager_autocast(again, want, f32, low)


def test_autocast_blocks_inside_a_frame() -> None:
    # Nested blocks, enabled=False, f16 inside bf16, the three spellings, and the state queries.
    torch.manual_seed(0)
    w = torch.randn(16, 16)

    def f(x: torch.Tensor) -> tuple[Any, ...]:
        outside = x @ w
        with torch.autocast("cpu", dtype=torch.bfloat16):
            a = x @ w
            on = torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")
            with torch.autocast("cpu", enabled=False):
                b = a.float() @ w
                off = torch.is_autocast_enabled("cpu")
            with torch.amp.autocast("cpu", dtype=torch.float16):
                c = F.linear(x, w)
                d = torch.autocast("cpu")  # the default dtype is the current one: f16
                with d:
                    e = torch.mm(x, w)
            with torch.cpu.amp.autocast():
                g = torch.bmm(x[None], w[None])
        return outside, a, b, c, e, g, on, off, torch.is_autocast_enabled("cpu")

    x = torch.randn(4, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.cpu.amp.autocast is deprecated
        report, again, want = compile_under(f, (x,), None)
        f32 = tuple(x @ w for _ in range(6))
    assert report.graph_count == 1 and report.graph_break_count == 0, str(report)
    dtypes = [torch.float32, torch.bfloat16, torch.float32, torch.float16, torch.float16, torch.bfloat16]
    for out in (report.output, again):
        assert [t.dtype for t in out[:6]] == [t.dtype for t in want[:6]] == dtypes
        assert out[6:] == want[6:] == ((True, torch.bfloat16), False, False)
        for g, a, r in zip(out[:6], want[:6], f32, strict=True):
            assert normwise(g, r) <= max(1.5 * normwise(a, r), 2.0**-8)


def test_one_entry_per_autocast_state() -> None:
    # Off, bf16, f16 and bf16 without the cast cache: four entries, each reused.
    from xjit import _frontend

    torch.manual_seed(0)
    lin = nn.Linear(8, 8)

    def f(x: torch.Tensor) -> tuple[torch.Tensor, bool]:
        return torch.relu(lin(x)), torch.is_autocast_enabled("cpu")

    x = torch.randn(4, 8)
    compiled = xjit.jit(f)
    states = [
        lambda: torch.autocast("cpu", enabled=False),
        lambda: torch.autocast("cpu", dtype=torch.bfloat16),
        lambda: torch.autocast("cpu", dtype=torch.float16),
        lambda: torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False),
    ]
    _frontend.reset()
    _frontend.set_recording(True)
    try:
        for _ in range(2):
            for state in states:
                with torch.no_grad(), state():
                    got, want = compiled(x), f(x)
                assert got[0].dtype == want[0].dtype and got[1] == want[1]
                torch.testing.assert_close(got[0], want[0], rtol=1e-2, atol=1e-2)
    finally:
        _frontend.set_recording(False)
    report = xjit.ExplainReport.from_events(_frontend.events())
    assert report.graph_count == 4 and report.cache_hits == 4, str(report)
    assert sum("autocast" in r.guard for r in report.recompiles) == 3, str(report)


@pytest.mark.parametrize("op", ["einsum", "cdist", "break_in_block"])
def test_what_the_capture_cannot_model_runs_as_eager(op: str) -> None:
    # einsum: eager's casts depend on the equation; cdist: a PyTorch fallback, whose result type
    # comes from a meta run that autocast does not see; a graph break inside an autocast block.
    torch.manual_seed(0)
    w = torch.randn(8, 8)

    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.relu(x @ w)
        if op == "einsum":
            z = torch.einsum("ij,jk->ik", y, w)
        elif op == "cdist":
            z = torch.cdist(y, x)
        else:
            with torch.autocast("cpu", dtype=torch.float16):
                z = x @ w
                print(end="")
                z = z @ w
        return y, z

    x = torch.randn(4, 8)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        got, want = xjit.jit(f)(x), f(x)
    for g, e in zip(got, want, strict=True):
        assert g.dtype == e.dtype
        torch.testing.assert_close(g, e, rtol=1e-2, atol=1e-2)


def test_training_step_under_autocast() -> None:
    # The usual pattern: forward and loss under autocast, backward outside. Gradients of the
    # casts are casts back: f32 gradients for the f32 parameters.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    ref = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    ref.load_state_dict(model.state_dict())
    compiled = xjit.jit(model)
    x, target = torch.randn(8, 16), torch.randn(8, 4)

    def step(m: nn.Module) -> tuple[torch.Tensor, list[torch.Tensor]]:
        m.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = m(x)
            loss = F.mse_loss(out, target)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in m.parameters()]

    with warnings.catch_warnings():
        warnings.simplefilter("error", xjit.XjitWarning)
        for _ in range(2):
            got_loss, got_grads = step(compiled)
    want_loss, want_grads = step(ref)
    f32 = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    f32.load_state_dict(model.state_dict())
    f32_loss = F.mse_loss(f32(x), target)
    f32_loss.backward()
    assert got_loss.dtype == want_loss.dtype == torch.float32
    assert normwise(got_loss, f32_loss.detach()) <= max(1.5 * normwise(want_loss, f32_loss.detach()), 2.0**-8)
    for g, w, p in zip(got_grads, want_grads, f32.parameters(), strict=True):
        assert g.dtype == w.dtype == torch.float32
        assert normwise(g, p.grad) <= max(1.5 * normwise(w, p.grad), 2.0**-8)


def test_autocast_on_another_device_runs_as_eager() -> None:
    # CUDA's autocast state (set without a GPU): the frame runs in Python, explain says why.
    lin = nn.Linear(8, 8)

    def f(x: torch.Tensor) -> tuple[torch.Tensor, bool]:
        return torch.relu(lin(x)), torch.is_autocast_enabled()

    x = torch.randn(4, 8)
    torch.set_autocast_enabled("cuda", True)
    try:
        with torch.no_grad():
            report = xjit.explain(f)(x)
            want = f(x)
    finally:
        torch.set_autocast_enabled("cuda", False)
    assert report.graph_count == 0, str(report)
    assert any("another device" in b.reason for b in report.graph_breaks), str(report)
    assert report.output[1] is want[1] is True
    torch.testing.assert_close(report.output[0], want[0], rtol=0, atol=0)
