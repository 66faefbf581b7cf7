"""Losses lowered into the graph (src/frontend/torch_ops.cpp lowerCrossEntropy, lowerMseLoss), so
that a training step computing its loss inside the compiled frame trains compiled: F.cross_entropy
with class weights, label smoothing (both, with ignore_index, every reduction, [N, C, L] logits,
one unbatched row) and probability targets; F.mse_loss of broadcasting operands. Losses and
gradients against eager's; explain reports the step compiled."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from frontend_fixtures import clean, fe  # noqa: E402, F401 (autouse fixture)

F = torch.nn.functional


def check_trains_compiled(step: Any, logits: Any, *rest: Any) -> None:
    w1, w2 = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    got, want = xjit.jit(step)(w1, *rest), step(w2, *rest)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    grad = torch.randn(got.shape)
    got.backward(grad)
    want.backward(grad)
    torch.testing.assert_close(w1.grad, w2.grad, rtol=1e-5, atol=1e-6)
    graphs = fe.events()["graphs"]
    assert len(graphs) == 1 and not graphs[0]["runs_in_python"], graphs[0]["note"]
    assert graphs[0]["note"].startswith("training step: forward"), graphs[0]["note"]


CLASS_INDEX_FORMS = [
    ((12, 5), {"weight": True}),
    ((12, 5), {"weight": True, "reduction": "sum"}),
    ((12, 5), {"weight": True, "reduction": "none", "ignore_index": 1}),
    ((12, 5), {"label_smoothing": 0.1}),
    ((12, 5), {"label_smoothing": 0.2, "ignore_index": 3, "reduction": "sum"}),
    ((12, 5), {"weight": True, "label_smoothing": 0.1}),
    ((12, 5), {"weight": True, "label_smoothing": 0.3, "ignore_index": 0}),
    ((12, 5), {"weight": True, "label_smoothing": 0.1, "reduction": "none"}),
    ((4, 5, 3), {"weight": True, "label_smoothing": 0.1, "ignore_index": 2}),  # [N, C, L]
    ((5,), {"weight": True, "label_smoothing": 0.1}),  # one unbatched row
]


@pytest.mark.parametrize(
    "shape,kwargs", CLASS_INDEX_FORMS, ids=[f"{s}-{sorted(k.items())}" for s, k in CLASS_INDEX_FORMS]
)
def test_cross_entropy_class_weights_and_smoothing_train_compiled(
    shape: tuple[int, ...], kwargs: dict[str, Any]
) -> None:
    torch.manual_seed(len(kwargs) + sum(shape))
    classes = shape[1] if len(shape) > 1 else shape[0]
    target = torch.randint(0, classes, (shape[0], *shape[2:]) if len(shape) > 1 else ())
    kw = dict(kwargs)
    if kw.pop("weight", False):
        kw["weight"] = torch.rand(classes) + 0.5
    scale = torch.randn(shape)

    def step(w: Any, t: Any) -> Any:
        return F.cross_entropy(w * scale, t, **kw)

    check_trains_compiled(step, torch.randn(shape), target)


PROBABILITY_FORMS = [
    ((6, 4), {}),
    ((6, 4), {"reduction": "sum"}),
    ((6, 4), {"reduction": "none", "weight": True}),
    ((6, 4), {"label_smoothing": 0.15, "weight": True}),
    ((3, 4, 5), {"label_smoothing": 0.1}),
    ((4,), {"weight": True}),
]


@pytest.mark.parametrize(
    "shape,kwargs", PROBABILITY_FORMS, ids=[f"{s}-{sorted(k.items())}" for s, k in PROBABILITY_FORMS]
)
def test_cross_entropy_probability_targets_train_compiled(
    shape: tuple[int, ...], kwargs: dict[str, Any]
) -> None:
    torch.manual_seed(sum(shape))
    classes = shape[1] if len(shape) > 1 else shape[0]
    target = torch.softmax(torch.randn(shape), dim=1 if len(shape) > 1 else 0)
    kw = dict(kwargs)
    if kw.pop("weight", False):
        kw["weight"] = torch.rand(classes) + 0.5

    def step(w: Any, t: Any) -> Any:
        return F.cross_entropy(torch.tanh(w), t, **kw)

    check_trains_compiled(step, torch.randn(shape), target)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize(
    "shapes", [((4, 3), (3,)), ((4, 1), (4, 3)), ((2, 1, 3), (5, 1))], ids=["row", "column", "both"]
)
def test_mse_loss_broadcasting_trains_compiled_and_warns(
    shapes: tuple[tuple[int, ...], tuple[int, ...]], reduction: str
) -> None:
    torch.manual_seed(3)
    x, t = torch.randn(shapes[0]), torch.randn(shapes[1])

    def step(w: Any, t: Any) -> Any:
        return F.mse_loss(w * 2, t, reduction=reduction)

    # PyTorch's warning, given by xjit when it captures the frame (eager gives its own).
    w1, w2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    message = r"target size \(torch.Size\(\[.*\]\)\) that is different to the input size"
    with pytest.warns(UserWarning, match=message):
        got = xjit.jit(step)(w1, t)
    with pytest.warns(UserWarning, match=message):
        want = step(w2, t)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    grad = torch.randn(got.shape)
    got.backward(grad)
    want.backward(grad)
    torch.testing.assert_close(w1.grad, w2.grad, rtol=1e-5, atol=1e-6)
    graphs = fe.events()["graphs"]
    assert len(graphs) == 1 and not graphs[0]["runs_in_python"], graphs[0]["note"]


nn = torch.nn


def _ce_module(logits: Any, target: Any) -> Any:
    h = torch.tanh(logits)
    loss_fct = nn.CrossEntropyLoss()  # built inside the frame, as transformers' task heads do
    return loss_fct(h.view(-1, 5), target.view(-1))


def _mse_module(pred: Any, target: Any) -> Any:
    h = pred * 2
    return nn.MSELoss(reduction="sum")(h, target)


@pytest.mark.parametrize(
    ("step", "target"),
    [
        (_ce_module, torch.randint(0, 5, (12,))),
        (_mse_module, torch.randn(12, 5)),
    ],
    ids=["cross_entropy", "mse"],
)
def test_loss_modules_built_in_the_frame_train_compiled(step: Any, target: Any) -> None:
    # A torch.nn module without parameters or buffers, built from constants inside the frame, is
    # made once at capture and inlined (analyzer_calls.cpp statelessTorchModule).
    torch.manual_seed(0)
    check_trains_compiled(step, torch.randn(12, 5), target)


def test_a_module_built_in_the_frame_that_escapes_runs_in_python() -> None:
    # Returned, it would be the capture's object at every call, not a new one: not compiled.
    def make(x: Any) -> Any:
        act = nn.ReLU()
        return act(x), act

    x = torch.randn(4)
    out, act = xjit.jit(make)(x)
    out2, act2 = xjit.jit(make)(x)
    torch.testing.assert_close(out, torch.relu(x))
    assert isinstance(act, nn.ReLU) and act is not act2


BCE_FORMS = [
    {},
    {"reduction": "sum"},
    {"reduction": "none"},
    {"weight": True},
    {"pos_weight": True},
    {"weight": True, "pos_weight": True, "reduction": "sum"},
]


@pytest.mark.parametrize("kwargs", BCE_FORMS, ids=[str(sorted(k.items())) for k in BCE_FORMS])
def test_bce_with_logits_trains_compiled(kwargs: dict[str, Any]) -> None:
    # ATen's form, (1 - t) * x - log_sigmoid(x) (scaled by pos_weight's log weight), lowered so
    # that transformers' multi-label heads train compiled; large logits on both sides.
    torch.manual_seed(3)
    opts = dict(kwargs)
    if opts.pop("weight", False):
        opts["weight"] = torch.rand(5)
    if opts.pop("pos_weight", False):
        opts["pos_weight"] = torch.rand(5) * 3

    def step(x: Any, t: Any) -> Any:
        return F.binary_cross_entropy_with_logits(x * 4, t, **opts)

    check_trains_compiled(step, torch.randn(6, 5) * 10, torch.rand(6, 5).round())


def test_bce_with_logits_module_built_in_the_frame_trains_compiled() -> None:
    def step(x: Any, t: Any) -> Any:
        h = torch.tanh(x) * 3
        return nn.BCEWithLogitsLoss()(h, t)

    torch.manual_seed(4)
    check_trains_compiled(step, torch.randn(6, 5), torch.rand(6, 5))
