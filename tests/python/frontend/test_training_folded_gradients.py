"""Training steps whose passes fold a gradient path away: eager's autograd still connects the
inputs on it (their gradient is zeros, not None) and the outputs still require grad. The
training entry reads which inputs each output reaches on the graph as captured, before passes
(fuzzer seed 58071: `v = (a0 @ w).clone(); v.zero_(); sign(v + a1)` left a0.grad None)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from frontend_fixtures import clean, fe  # noqa: E402, F401 (autouse fixture)

W = torch.linspace(-1, 1, 16).reshape(4, 4)


def zeroed_product(a: Any, b: Any) -> Any:  # the fuzzer's program
    v = (a @ W.t()).clone()
    v.zero_()
    return torch.sign(v + b), (a * 3).sum(-1) > 0


def zeroed_only(a: Any, b: Any) -> Any:  # every gradient path folds away
    v = (a * 2).clone()
    v.zero_()
    return v


def times_zero(a: Any, b: Any) -> Any:
    return a * 0 + b, a - a


def filled_slice(a: Any, b: Any) -> Any:  # a partial fill keeps a; a whole one folds it
    v = a * b
    v[:, :2] = 7.0
    u = a + 1
    u.fill_(2.0)
    return v, u * b


def overwritten(a: Any, b: Any) -> Any:  # copy_ over a computed value: zeros to its old inputs
    v = a + 1
    v.copy_(b.expand(3, 4))
    return v * 2


def one_output_unused(a: Any, b: Any) -> Any:  # the loss reads only the second output
    v = (a * 5).clone()
    v.zero_()
    return v + 1, b * 2


PROGRAMS: dict[str, Callable[[Any, Any], Any]] = {
    f.__name__: f
    for f in (zeroed_product, zeroed_only, times_zero, filled_slice, overwritten, one_output_unused)
}


def loss_of(outputs: Any, name: str) -> Any:
    outs = outputs if isinstance(outputs, tuple) else (outputs,)
    if name == "one_output_unused":
        return outs[1].sum()
    return sum(o.float().sum() for o in outs if o.requires_grad)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_folded_paths_give_eagers_zeros_and_nones(name: str) -> None:
    fn = PROGRAMS[name]
    torch.manual_seed(3)
    made = [torch.randn(3, 4), torch.randn(())]
    xs = [t.clone().requires_grad_(True) for t in made]
    ys = [t.clone().requires_grad_(True) for t in made]
    got, want = xjit.jit(fn)(*xs), fn(*ys)
    got_t = got if isinstance(got, tuple) else (got,)
    want_t = want if isinstance(want, tuple) else (want,)
    for k, (g, w) in enumerate(zip(got_t, want_t, strict=True)):
        torch.testing.assert_close(g, w)
        assert g.requires_grad == w.requires_grad, f"output {k}"
    loss_of(want, name).backward()
    loss_of(got, name).backward()
    for k, (a, b) in enumerate(zip(xs, ys, strict=True)):
        assert (a.grad is None) == (b.grad is None), f"input {k}: {a.grad} against eager's {b.grad}"
        if b.grad is not None:
            torch.testing.assert_close(a.grad, b.grad, msg=f"gradient of input {k}")
    graphs = fe.events()["graphs"]
    assert len(graphs) == 1 and not graphs[0]["runs_in_python"], graphs[0]["note"]
    assert graphs[0]["note"].startswith("training step"), graphs[0]["note"]
