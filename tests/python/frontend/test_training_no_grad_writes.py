"""In-place writes inside `torch.no_grad()` regions of training steps: a parameter clamped before
the forward, an EMA of the weights kept in a buffer, a buffer written through a view, an
activation clipped. The step trains compiled where eager's meaning is clear (the written tensor
needs no gradient, or one that requires grad is written before anything reads it with grad and
its producer keeps no copy of it: its later readers still send the gradient where its own went,
its version counter moves), and runs in Python, with the reason, where eager's backward may
refuse the changed tensor (until session 22 such a write gave the tensor no gradient: a leaf's
.grad stayed None, a loss over an activation did not require grad)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from frontend_fixtures import clean, fe  # noqa: E402, F401 (autouse fixture)

nn = torch.nn


class Clamped(nn.Module):
    """A weight kept in [-0.5, 0.5] by the forward itself (weight clipping, as in WGAN)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(5, 4))
        self.scale = nn.Parameter(torch.randn(4))

    def forward(self, x: Any) -> Any:
        with torch.no_grad():
            self.weight.clamp_(-0.5, 0.5)
            self.scale.mul_(0.9).add_(0.1)  # two writes to one leaf
        return torch.tanh(x @ self.weight * self.scale)


class Ema(nn.Module):
    """An exponential moving average of the weight in a buffer, and a buffer row reset through
    a view."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(5, 4))
        self.register_buffer("ema", torch.zeros(5, 4))
        self.register_buffer("stats", torch.ones(3, 4))

    def forward(self, x: Any) -> Any:
        y = torch.tanh(x @ self.weight)
        with torch.no_grad():
            self.ema.mul_(0.9).add_(self.weight, alpha=0.1)
            self.stats[:, 0].fill_(0)
            self.stats[1] += y.mean(0)
        return y * self.stats[1]


class ReadThenClamp(nn.Module):
    """The weight read with grad, then clamped under no_grad: eager's backward would see the
    changed leaf (here it saves nothing, so eager runs; xjit does not decide that per op)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(5, 4))

    def forward(self, x: Any) -> Any:
        y = x.sum(1, keepdim=True) + self.weight.sum(0)
        with torch.no_grad():
            self.weight.clamp_(-0.5, 0.5)
        return y + x @ self.weight


def _train(model: nn.Module, steps: int) -> tuple[nn.Module, nn.Module, list[Any], list[Any]]:
    eager = copy.deepcopy(model)
    compiled = xjit.jit(model)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, eager)]
    torch.manual_seed(1)
    batches = [torch.randn(3, 5) for _ in range(steps)]
    losses: tuple[list[Any], list[Any]] = ([], [])
    for x in batches:
        for net, opt, out in ((compiled, opts[0], losses[0]), (eager, opts[1], losses[1])):
            opt.zero_grad()
            loss = net(x).pow(2).sum()
            loss.backward()
            opt.step()
            out.append(loss.detach())
    return model, eager, *losses


@pytest.mark.parametrize("cls", [Clamped, Ema], ids=["clamped_parameter", "ema_buffer"])
def test_no_grad_writes_train_compiled(cls: type[nn.Module]) -> None:
    torch.manual_seed(0)
    model, eager, got, want = _train(cls(), steps=4)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for (name, a), b in zip(model.state_dict().items(), eager.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")
    graphs = [g for g in fe.events()["graphs"] if g["note"].startswith("training step")]
    assert graphs and not any(g["runs_in_python"] for g in graphs), fe.events()["graphs"]


def test_a_leaf_written_under_no_grad_keeps_eagers_version_and_gradient() -> None:
    torch.manual_seed(0)
    a, b = Clamped(), Clamped()
    b.load_state_dict(a.state_dict())
    x = torch.randn(3, 5)
    versions = [(m.weight._version, m.scale._version) for m in (a, b)]
    xjit.jit(a)(x).sum().backward()
    b(x).sum().backward()
    for m, (vw, vs) in zip((a, b), versions, strict=True):
        assert m.weight.is_leaf and m.weight.requires_grad
        assert m.weight._version - vw == 1  # one write each (eager: clamp_; xjit: one copy_)
        assert m.scale._version - vs >= 1
    torch.testing.assert_close(a.weight, b.weight)
    torch.testing.assert_close(a.weight.grad, b.weight.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(a.scale.grad, b.scale.grad, rtol=1e-5, atol=1e-6)
    graphs = fe.events()["graphs"]
    assert len(graphs) == 1 and not graphs[0]["runs_in_python"], graphs


def test_a_leaf_read_with_grad_then_written_runs_in_python() -> None:
    torch.manual_seed(0)
    model, eager, got, want = _train(ReadThenClamp(), steps=2)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(model.weight, eager.weight)
    events = fe.events()
    assert all(g["runs_in_python"] for g in events["graphs"]), events["graphs"]
    assert any("read it with grad" in b["reason"] for b in events["breaks"]), events["breaks"]


def _clip_activation(x: Any, w: Any) -> Any:
    h = x @ w + 1  # add saves nothing: eager's backward allows h to change
    with torch.no_grad():
        h.clamp_(-0.5, 0.5)
    return (h * h).sum()


def _clip_saved_activation(x: Any, w: Any) -> Any:
    h = torch.tanh(x @ w)  # tanh saves its result: eager's backward refuses it changed
    with torch.no_grad():
        h.clamp_(-0.5, 0.5)
    return (h * h).sum()


def test_an_activation_written_under_no_grad_keeps_its_producers_gradient() -> None:
    torch.manual_seed(0)
    x, w = torch.randn(3, 4), torch.randn(4, 5)
    xs, ys = [x.clone().requires_grad_(), w.clone().requires_grad_()], [x.clone().requires_grad_(),
                                                                          w.clone().requires_grad_()]
    got, want = xjit.jit(_clip_activation)(*xs), _clip_activation(*ys)
    torch.testing.assert_close(got, want)
    assert got.requires_grad
    got.backward()
    want.backward()
    for a, b in zip(xs, ys, strict=True):
        torch.testing.assert_close(a.grad, b.grad)
    graphs = fe.events()["graphs"]
    assert len(graphs) == 1 and not graphs[0]["runs_in_python"], graphs


def test_a_saved_activation_written_under_no_grad_runs_in_python() -> None:
    torch.manual_seed(0)
    x, w = torch.randn(3, 4).requires_grad_(), torch.randn(4, 5).requires_grad_()
    got = xjit.jit(_clip_saved_activation)(x, w)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        got.backward()  # as eager: the frame ran in Python
    events = fe.events()
    assert any("made by 'tanh'" in b["reason"] for b in events["breaks"]), events["breaks"]


class RowReset(nn.Module):
    """A weight row zeroed and a weight view read under no_grad, in the forward."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(5, 4))

    def forward(self, x: Any) -> Any:
        with torch.no_grad():
            self.weight[0].fill_(0)  # a write through a no_grad view reaches the leaf
            norm = self.weight.view(-1).abs().max()  # read without gradient
        return torch.tanh(x @ self.weight) / norm


class StridedNorm(nn.Module):
    """A statistic of the weight read under no_grad through a PyTorch fallback view
    (`as_strided`: every other column), as a scale the gradient does not see."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(5, 4))

    def forward(self, x: Any) -> Any:
        h = x @ self.weight
        with torch.no_grad():
            cols = self.weight.as_strided((5, 2), (4, 2))
            scale = cols.abs().mean() + h.as_strided((3,), (5,)).abs().mean()
        return torch.tanh(h / scale)


@pytest.mark.parametrize("cls", [RowReset, StridedNorm], ids=["row_reset", "fallback_view"])
def test_no_grad_views_of_a_leaf_train_compiled(cls: type[nn.Module]) -> None:
    # Writes through no_grad views of a leaf (session 22), and PyTorch fallback views of it
    # read under no_grad (until session 23 "the frame stops a gradient": Python), which read
    # it through an autodiff.stop alias as the region's own ops do.
    torch.manual_seed(0)
    model, eager, got, want = _train(cls(), steps=3)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(model.weight, eager.weight, rtol=1e-5, atol=1e-6)
    graphs = fe.events()["graphs"]
    assert graphs and not any(g["runs_in_python"] for g in graphs), graphs
    assert any(g["note"].startswith("training step") for g in graphs), graphs


def _write_no_grad_view_with_grad(x: Any, w: Any) -> Any:
    h = x @ w
    with torch.no_grad():
        v = h[0]
    v.mul_(2)  # eager raises: a no_grad view written with grad enabled
    return h.sum()


def test_a_no_grad_view_written_with_grad_raises_as_in_eager() -> None:
    x, w = torch.randn(3, 4).requires_grad_(), torch.randn(4, 5).requires_grad_()
    with pytest.raises(RuntimeError, match="no_grad mode"):
        _write_no_grad_view_with_grad(x, w)
    with pytest.raises(RuntimeError, match="no_grad mode"):
        xjit.jit(_write_no_grad_view_with_grad)(x, w)


def test_a_fallback_view_under_no_grad_carries_no_gradient() -> None:
    def fn(x: Any, w: Any) -> Any:
        with torch.no_grad():
            v = w.as_strided((2, 2), (1, 4))  # of a leaf that requires grad
            s = v.sum()
        return x @ w * s, s

    x, w = torch.randn(3, 4), torch.randn(4, 5)
    xs, ws = [x.clone(), w.clone().requires_grad_()], [x.clone(), w.clone().requires_grad_()]
    got, want = xjit.jit(fn)(*xs), fn(*ws)
    for g, e in zip(got, want, strict=True):
        torch.testing.assert_close(g, e)
        assert g.requires_grad == e.requires_grad
    got[0].sum().backward()
    want[0].sum().backward()
    torch.testing.assert_close(xs[1].grad, ws[1].grad)
    graphs = fe.events()["graphs"]
    assert graphs and not graphs[0]["runs_in_python"], graphs
