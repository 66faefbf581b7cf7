"""torch.autograd.Function.apply under the frontend: with grad disabled the Function's forward is
inlined (a stand-in ctx; apply records nothing for a backward then), so its ops join the graph
instead of one PyTorch fallback node; with grad enabled apply still runs as PyTorch, and the
backward works. Values against eager in every case."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from frontend_fixtures import clean  # noqa: E402, F401 (autouse fixture)


class TanhGelu(torch.autograd.Function):  # BLOOM's GeLUFunction
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        t = torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x))
        return g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * (0.79788456 + 0.1070322243 * x * x))


class PassThrough(torch.autograd.Function):  # returns an input, marks one non-differentiable
    @staticmethod
    def forward(ctx, x, y):
        ctx.mark_non_differentiable(y)
        ctx.scale = 2.0  # state a backward would read
        return x, y * ctx.scale + len(ctx.needs_input_grad)

    @staticmethod
    def backward(ctx, a, b):
        return a, None


class NoCtx(torch.autograd.Function):  # new style: forward without ctx, setup_context apart
    @staticmethod
    def forward(x, k: int):
        return x.exp() * k

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.k = inputs[1]

    @staticmethod
    def backward(ctx, g):
        return g, None


class Dirty(torch.autograd.Function):  # mark_dirty: not inlined (a graph break), still right
    @staticmethod
    def forward(ctx, x):
        x.add_(1)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return g


def uses_all(x, y):
    a = TanhGelu.apply(x) + 1
    b, c = PassThrough.apply(x, y)
    return a, b, c, NoCtx.apply(y, 3)


def test_forward_is_inlined_under_no_grad() -> None:
    x, y = torch.randn(6), torch.randn(6)
    with torch.no_grad():
        want = uses_all(x, y)
        with warnings.catch_warnings():
            warnings.simplefilter("error", xjit.XjitWarning)
            report = xjit.explain(uses_all)(x, y)
        got = xjit.jit(uses_all)(x, y)
    assert report.graph_count == 1 and report.graph_break_count == 0, str(report)
    assert "external_call" not in report.graphs[0].ops, str(report)
    assert report.graphs[0].ops.get("tanh") == 1 and report.graphs[0].ops.get("exp") == 1
    for out in (report.output, got):
        for g, w in zip(out, want, strict=True):
            torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)
    # apply returns an input it got unchanged as a view of it: writes reach the input.
    assert got[1].data_ptr() == x.data_ptr() and got[1] is not x


def test_mark_dirty_breaks_and_matches_eager() -> None:
    def f(x):
        return Dirty.apply(x) * 2

    x_e, x_c = torch.randn(5), torch.randn(5)
    x_c.copy_(x_e)
    with torch.no_grad():
        want, got = f(x_e), xjit.jit(f)(x_c)
        report = xjit.explain(f)(x_c.clone())
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    torch.testing.assert_close(x_c, x_e, rtol=0, atol=0)
    assert "mark_dirty" in report.graph_breaks[0].reason, str(report)


def test_grad_enabled_keeps_apply_and_its_backward() -> None:
    def f(x):
        return (TanhGelu.apply(x) * 3).sum()

    x_e = torch.randn(7, requires_grad=True)
    x_c = x_e.detach().clone().requires_grad_(True)
    f(x_e).backward()
    xjit.jit(f)(x_c).backward()
    torch.testing.assert_close(x_c.grad, x_e.grad, rtol=1e-6, atol=1e-6)


# ---- grad enabled: the Function's forward and backward compiled into the training step ----

nn = torch.nn


class RoundSTE(torch.autograd.Function):  # straight-through: the true derivative of round is 0
    @staticmethod
    def forward(ctx, x):
        return torch.round(x)

    @staticmethod
    def backward(ctx, g):
        return g


class TwoOutputs(torch.autograd.Function):  # two outputs; no gradient for the scale
    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x, scale)
        return x * scale, torch.sin(x)

    @staticmethod
    def backward(ctx, ga, gb):
        x, scale = ctx.saved_tensors
        return ga * scale + gb * torch.cos(x), None


class SavesOnCtx(torch.autograd.Function):  # an intermediate kept as a ctx attribute
    @staticmethod
    def forward(ctx, x):
        e = torch.exp(x * 0.5)
        ctx.e = e
        ctx.factor = 3.0
        return e * ctx.factor

    @staticmethod
    def backward(ctx, g):
        return g * ctx.e * (0.5 * ctx.factor)


class Product(torch.autograd.Function):  # gradients only where needs_input_grad asks
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x @ w

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        gx = g @ w.t() if ctx.needs_input_grad[0] else None
        gw = x.t() @ g if ctx.needs_input_grad[1] else None
        return gx, gw


class OnceSine(torch.autograd.Function):  # @once_differentiable: its wrapper is captured too
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sin(x)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.cos(x) * 2  # not sin's derivative: the user's backward is what counts


class DoubledFlat(torch.autograd.Function):  # returns a view of a tensor it made
    @staticmethod
    def forward(ctx, x):
        ctx.shape = x.shape
        return (x * 2).view(-1)

    @staticmethod
    def backward(ctx, g):
        return g.view(ctx.shape) * 2


class Uncapturable(torch.autograd.Function):  # the backward needs a value in Python
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * float(g.abs().max())


class Net(nn.Module):
    def __init__(self, body) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.w = nn.Parameter(torch.randn(8, 5))
        self.body = body

    def forward(self, x):
        return self.body(self, x)


BODIES = {
    "gelu": lambda m, x: TanhGelu.apply(m.fc(x)) @ m.w,
    "ste": lambda m, x: RoundSTE.apply(m.fc(x) * 3) @ m.w,
    "two_outputs": lambda m, x: sum(TwoOutputs.apply(m.fc(x), torch.full((8,), 1.5))) @ m.w,
    "ctx_attribute": lambda m, x: SavesOnCtx.apply(m.fc(x)) @ m.w,
    "needs_input_grad": lambda m, x: Product.apply(x, m.w) + m.fc(x).sum(),
    "once_differentiable": lambda m, x: OnceSine.apply(m.fc(x)) @ m.w,
    "view_output": lambda m, x: DoubledFlat.apply(m.fc(x)).view(-1, 8) @ m.w,
    # No input requires grad: apply records nothing, the forward is inlined under no_grad.
    "input_without_grad": lambda m, x: SavesOnCtx.apply(x) @ m.w + m.fc(x).sum(),
}


def train_step_both(body, x, *, graph_note: bool = True):
    """One step's loss and gradients, compiled and eager, and the compiled graph's note."""
    torch.manual_seed(0)
    eager = Net(body)
    compiled = Net(body)
    compiled.load_state_dict(eager.state_dict())
    r = torch.randn(x.shape[0], 5)
    want = (eager(x) * r).sum()
    want.backward()
    with warnings.catch_warnings():
        warnings.simplefilter("error", xjit.XjitWarning)
        report = xjit.explain(xjit.jit(compiled))(x)
    got = (report.output * r).sum()
    got.backward()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for (name, p), q in zip(compiled.named_parameters(), eager.parameters(), strict=True):
        assert (p.grad is None) == (q.grad is None), name
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")
    notes = [g.note for g in report.graphs]
    return report, notes


@pytest.mark.parametrize("body", sorted(BODIES))
def test_grad_enabled_trains_compiled_with_the_functions_backward(body: str) -> None:
    report, notes = train_step_both(BODIES[body], torch.randn(4, 8))
    assert report.graph_count == 1 and report.graph_break_count == 0, str(report)
    assert not report.graphs[0].runs_in_python, notes
    assert notes[0].startswith("training step"), notes


def test_straight_through_uses_the_users_backward() -> None:
    # round() has derivative 0: a gradient that reaches fc.weight is the Function's identity.
    torch.manual_seed(1)
    m = Net(BODIES["ste"])
    compiled = xjit.jit(m)
    (compiled(torch.randn(4, 8)) * torch.randn(4, 5)).sum().backward()
    assert m.fc.weight.grad.abs().sum() > 0


def test_functions_that_cannot_be_captured_keep_pytorchs_apply() -> None:
    # A backward that needs a Python value: apply stays a PyTorch call and the step runs under
    # eager autograd, with the reason.
    _, notes = train_step_both(lambda m, x: Uncapturable.apply(m.fc(x)) @ m.w, torch.randn(4, 8))
    assert "Uncapturable.apply, not captured: " in notes[0] and "float" in notes[0], notes
    # mark_dirty (an in-place forward) on an intermediate: same.
    _, notes = train_step_both(lambda m, x: Dirty.apply(m.fc(x) * 1) @ m.w, torch.randn(4, 8))
    assert "Dirty.apply, not captured: in-place write" in notes[0], notes


class ScaleNoWeightGrad(torch.autograd.Function):
    """x * w whose backward gives w no gradient on purpose (a frozen scale)."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(w)
        return x * w

    @staticmethod
    def backward(ctx, g):
        (w,) = ctx.saved_tensors
        return g * w, None


def test_an_input_the_backward_gives_none_keeps_none() -> None:
    # Autograd leaves .grad None for an input whose only path is a Function returning None for
    # it; a zero tensor instead would make AdamW decay it (gradOutputReach skips that operand).
    def step(x, w):
        return ScaleNoWeightGrad.apply(torch.tanh(x), w).sum()

    grads = []
    for fn in (xjit.jit(step), step):
        torch.manual_seed(2)
        x, w = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)
        fn(x, w).backward()
        grads.append((x.grad, w.grad))
    (gx, gw), (ex, ew) = grads
    torch.testing.assert_close(gx, ex)
    assert gw is None and ew is None
