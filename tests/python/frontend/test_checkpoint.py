"""Activation checkpointing (torch.utils.checkpoint.checkpoint) in compiled code (docs/frontend.md
"Activation checkpointing"): the checkpointed function is captured inline and the training
step's backward recomputes its values instead of saving them. Losses, gradients and outputs
must be eager's; what is left to eager (no use_reentrant, a context_fn, a checkpoint that is a
graph break) must still run and give eager's results, never the CheckpointError of a compiled
function that eager recomputes."""

from __future__ import annotations

import copy
import re
import warnings
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from frontend_fixtures import clean, fe  # noqa: E402, F401 (autouse fixture)

from torch.utils.checkpoint import checkpoint  # noqa: E402

nn = torch.nn
F = torch.nn.functional


class Blocks(nn.Module):
    """Residual MLP blocks, each one checkpointed or not, with dropout inside."""

    def __init__(self, use_reentrant: bool | None, p: float = 0.0, ckpt: bool = True, **kw: Any) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32)) for _ in range(3))
        self.p, self.use_reentrant, self.ckpt, self.kw = p, use_reentrant, ckpt, kw

    def block(self, i: int, x: Any) -> Any:
        return F.dropout(self.layers[i](x), self.p, self.training)

    def forward(self, x: Any) -> Any:
        for i in range(len(self.layers)):
            if not self.ckpt:
                x = x + self.block(i, x)
            elif self.use_reentrant is None:
                x = x + checkpoint(self.block, i, x, **self.kw)
            else:
                x = x + checkpoint(self.block, i, x, use_reentrant=self.use_reentrant, **self.kw)
        return x


def step(model: nn.Module, fn: Any, x: Any) -> tuple[Any, list[Any], Any]:
    torch.manual_seed(7)
    out = fn(x)
    loss = (out * torch.linspace(-1, 1, out.shape[-1])).sum()
    loss.backward()
    return out.detach(), [p.grad for p in model.parameters()], x.grad


def compare(model: nn.Module, x: Any) -> tuple[Any, Any]:
    eager = copy.deepcopy(model)
    x_e, x_c = (x.detach().clone().requires_grad_(x.requires_grad) for _ in range(2))
    want = step(eager, eager, x_e)
    got = step(model, xjit.jit(model), x_c)
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-6)
    for g, w in zip(got[1], want[1], strict=True):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
    if x.requires_grad:
        torch.testing.assert_close(got[2], want[2], rtol=1e-5, atol=1e-6)
    return got, want


def saved_values() -> int:
    graphs = fe.events()["graphs"]
    assert len(graphs) == 1, graphs
    note = graphs[0]["note"]
    assert note.startswith("training step: forward"), note
    m = re.search(r"\((\d+) values saved for backward\)", note)
    assert m, note
    return int(m.group(1))


@pytest.mark.parametrize("p", [0.0, 0.5])
@pytest.mark.parametrize("x_grad", [False, True])
def test_non_reentrant_checkpoint_trains_in_one_graph(p: float, x_grad: bool) -> None:
    torch.manual_seed(0)
    model = Blocks(use_reentrant=False, p=p)
    compare(model, torch.randn(8, 32, requires_grad=x_grad))
    saved_values()  # one compiled training graph, no break


def test_reentrant_checkpoint_with_an_input_that_requires_grad() -> None:
    torch.manual_seed(0)
    compare(Blocks(use_reentrant=True, p=0.5), torch.randn(8, 32, requires_grad=True))
    saved_values()


def test_checkpointed_values_are_recomputed_not_saved() -> None:
    torch.manual_seed(0)
    x = torch.randn(8, 32)
    compare(Blocks(use_reentrant=False, ckpt=False), x)
    plain = saved_values()
    fe.reset()
    torch.manual_seed(0)
    compare(Blocks(use_reentrant=False), x)
    checkpointed = saved_values()
    # Without checkpointing each block saves its hidden activations (linear and GELU inputs);
    # checkpointed, only the blocks' inputs are kept.
    assert checkpointed < plain, (checkpointed, plain)


def test_reentrant_checkpoint_without_inputs_that_require_grad_is_eagers() -> None:
    # Eager warns and its outputs need no grad: backward raises, in both.
    torch.manual_seed(0)
    model = Blocks(use_reentrant=True)
    eager = copy.deepcopy(model)
    x = torch.randn(8, 32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = eager(x)
        got = xjit.jit(model)(x)
    assert got.requires_grad == want.requires_grad
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("kw", [{}, {"context_fn": "sac"}])
def test_checkpoint_left_to_eager_runs_as_eager(kw: dict[str, Any]) -> None:
    # No use_reentrant (eager warns, reentrant) or a selective-checkpoint context_fn: a graph
    # break; the checkpointed function, compiled when called from the break code, must still
    # match eager's recompute (it runs in Python while saved-tensor hooks are set).
    if kw:
        from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

        def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> Any:
            return CheckpointPolicy.MUST_SAVE if op == torch.ops.aten.mm.default else CheckpointPolicy.PREFER_RECOMPUTE

        kw = {"context_fn": lambda: create_selective_checkpoint_contexts(policy)}
        use_reentrant: bool | None = False
    else:
        use_reentrant = None
    torch.manual_seed(0)
    model = Blocks(use_reentrant=use_reentrant, p=0.5, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compare(model, torch.randn(8, 32, requires_grad=True))


def test_saved_tensor_hooks_run_a_training_entry_in_python() -> None:
    # A compiled training step's saved values are not eager's: under saved-tensor hooks (here
    # counting what is packed) the frame runs in Python, so the hooks see eager's.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 4))
    compiled = xjit.jit(model)
    x = torch.randn(4, 16)
    compiled(x).sum().backward()  # compiled as a training step
    packed: list[tuple[int, ...]] = []

    def pack(t: Any) -> Any:
        packed.append(tuple(t.shape))
        return t

    eager = copy.deepcopy(model)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        eager(x).sum().backward()
        want = list(packed)
        packed.clear()
        compiled(x).sum().backward()
    assert packed == want


def test_checkpoint_under_no_grad_is_a_plain_call() -> None:
    torch.manual_seed(0)
    model = Blocks(use_reentrant=False).eval()
    x = torch.randn(8, 32)
    with torch.no_grad():
        want = copy.deepcopy(model)(x)
        got = xjit.jit(model)(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    graphs = fe.events()["graphs"]
    assert len(graphs) == 1 and not graphs[0]["runs_in_python"], graphs


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_hugging_face_gradient_checkpointing(use_reentrant: bool) -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=32)
    model = transformers.GPT2LMHeadModel(cfg).train()
    model.config.use_cache = False
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": use_reentrant})
    eager = copy.deepcopy(model)
    ids = torch.randint(0, 100, (2, 16))
    torch.manual_seed(1)
    want = eager(ids, labels=ids).loss
    want.backward()
    torch.manual_seed(1)
    got = xjit.jit(model)(ids, labels=ids).loss
    got.backward()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for (name, p), q in zip(model.named_parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")
    # One training graph: the layers' `checkpoint(partial(forward, self, **kwargs), ...)` and
    # the embeddings' `requires_grad_(True)` hook are captured, not graph breaks.
    assert not fe.events()["breaks"], fe.events()["breaks"]
    saved_values()


class Scale(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(8))

    def forward(self, x: Any, bias: Any = 0.0, *, power: int = 1) -> Any:
        return (x * self.w + bias) ** power


def test_partial_of_a_module_and_a_tensor_made_in_the_frame_is_called_inline() -> None:
    import functools

    mod = Scale()

    def f(x: Any, b: Any) -> Any:
        g = functools.partial(mod, bias=b, power=2)
        h = functools.partial(Scale.forward, mod, x)
        return g(x) + h(b, power=3) + g(x, power=1)

    x, b = torch.randn(4, 8), torch.randn(8)
    with torch.no_grad():
        torch.testing.assert_close(xjit.jit(f)(x, b), f(x, b))
    assert not fe.events()["breaks"], fe.events()["breaks"]
    assert len(fe.events()["graphs"]) == 1


def test_a_partial_made_in_the_frame_and_returned_runs_in_python() -> None:
    import functools

    def f(x: Any) -> Any:
        return functools.partial(torch.add, x)

    x = torch.randn(3)
    got = xjit.jit(f)(x)
    assert isinstance(got, functools.partial)
    torch.testing.assert_close(got(1.0), x + 1.0)


def test_checkpoint_sequential_trains_in_one_graph() -> None:
    from torch.utils.checkpoint import checkpoint_sequential

    torch.manual_seed(0)
    seq = nn.Sequential(*(nn.Sequential(nn.Linear(16, 16), nn.Tanh()) for _ in range(4)))
    eager = copy.deepcopy(seq)

    def f(net: Any, x: Any) -> Any:
        return checkpoint_sequential(net, 2, x, use_reentrant=False).sum()

    x = torch.randn(4, 16)
    want = f(eager, x)
    want.backward()
    got = xjit.jit(f)(seq, x)
    got.backward()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for p, q in zip(seq.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)
    assert not fe.events()["breaks"], fe.events()["breaks"]
    saved_values()
