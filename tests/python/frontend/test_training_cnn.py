"""A small CNN trains compiled (docs/frontend.md "Autograd", docs/passes.md "autodiff"): conv2d,
batch_norm in training mode (running statistics and num_batches_tracked written back as eager
writes them), relu, max/average pooling, dropout (its noise drawn by PyTorch from the global
generator as eager draws it) and linear, 10 SGD steps under xjit and eager from the same weights
and seeds: losses, parameters and buffers match eager's and explain reports the step compiled,
not run in Python."""

from __future__ import annotations

import copy
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
import xjit.ir  # noqa: E402
from frontend_fixtures import clean, fe  # noqa: E402, F401 (autouse fixture)

nn = torch.nn
F = torch.nn.functional


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.conv3 = nn.Conv2d(16, 16, 3, padding=1, groups=4)
        self.drop = nn.Dropout(0.25)
        self.fc = nn.Linear(16, 10)

    def forward(self, x: Any) -> Any:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.relu(self.bn2(self.conv2(x)))
        x = F.avg_pool2d(self.conv3(x), 2)
        return self.fc(self.drop(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)))


def test_small_cnn_trains_compiled_like_eager() -> None:
    torch.manual_seed(0)
    model = SmallCNN()
    eager = copy.deepcopy(model)
    compiled = xjit.jit(model)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, eager)]
    x, y = torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))
    got, want = [], []
    for step in range(10):
        for net, opt, losses in ((compiled, opts[0], got), (eager, opts[1], want)):
            torch.manual_seed(step)  # the same dropout noise in both
            opt.zero_grad()
            loss = F.cross_entropy(net(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    graphs = fe.events()["graphs"]
    assert len(graphs) == 1, graphs
    assert not graphs[0]["runs_in_python"], graphs[0]["note"]
    assert graphs[0]["note"].startswith("training step: forward"), graphs[0]["note"]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)
    assert got[-1] < got[0]  # it learns
    # Parameters, running statistics and num_batches_tracked (exactly: an integer count).
    for (name, a), b in zip(model.state_dict().items(), eager.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")
    assert int(model.bn1.num_batches_tracked) == 10


def test_batch_norm_eval_mode_trains_compiled() -> None:
    # Fine-tuning with frozen statistics: eval-mode batch_norm, gradients through its affine part.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
    model[1].running_mean.normal_()
    model[1].running_var.uniform_(0.5, 1.5)
    model.eval()
    eager = copy.deepcopy(model)
    x = torch.randn(2, 3, 8, 8)
    xjit.jit(model)(x).square().mean().backward()
    eager(x).square().mean().backward()
    graphs = fe.events()["graphs"]
    assert not graphs[0]["runs_in_python"], graphs[0]["note"]
    for (name, a), b in zip(model.named_parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")
    torch.testing.assert_close(model[1].running_mean, eager[1].running_mean)


def two_dropouts(x: Any, w: Any) -> Any:
    # Products only: each rounds once, in xjit as in eager (tanh's or a fused multiply-add's
    # last bit could differ and hide what this test checks).
    h = F.dropout(x * w, 0.3, True)
    return F.dropout(h * 2.0, 0.5, True) * w


def test_dropout_noise_is_eagers_bit_for_bit() -> None:
    # Two dropouts in one step: the same draws, in the same order, as eager's; the result is
    # bit-identical (the noise is PyTorch's, x * noise an exact product), the gradient equal to
    # rounding, and the generator ends where eager's ends.
    torch.manual_seed(0)
    x, w = torch.randn(8, 16), torch.randn(16)
    compiled = xjit.jit(two_dropouts)
    for step in range(3):
        leaves = [w.clone().requires_grad_() for _ in range(2)]
        torch.manual_seed(step)
        got = compiled(x, leaves[0])
        got.sum().backward()
        after_compiled = torch.rand(4)
        torch.manual_seed(step)
        want = two_dropouts(x, leaves[1])
        want.sum().backward()
        assert torch.equal(got, want), step
        assert (got == 0).any() and (got != 0).any()  # some dropped, some kept
        # (w's gradient sums over the batch, in another order than eager's.)
        torch.testing.assert_close(leaves[0].grad, leaves[1].grad, rtol=1e-6, atol=1e-6)
        assert torch.equal(after_compiled, torch.rand(4)), step
    graphs = fe.events()["graphs"]
    assert len(graphs) == 1 and not graphs[0]["runs_in_python"], graphs[0]["note"]
    assert graphs[0]["note"].startswith("training step: forward"), graphs[0]["note"]


@pytest.mark.parametrize(
    "dropout,shape",
    [(F.dropout1d, (4, 5, 6)), (F.dropout2d, (4, 5, 3, 3)), (F.dropout3d, (2, 5, 2, 2, 2))],
    ids=["1d", "2d", "3d"],
)
def test_channel_dropout_noise_is_eagers_bit_for_bit(dropout: Any, shape: tuple[int, ...]) -> None:
    # One draw per (sample, channel), as eager's feature_dropout: whole channels zeroed.
    def step(x: Any) -> Any:
        return dropout(x * 2.0, 0.4, True)

    x = torch.randn(shape)
    compiled = xjit.jit(step)
    for seed in range(2):
        leaves = [x.clone().requires_grad_() for _ in range(2)]
        torch.manual_seed(seed)
        got = compiled(leaves[0])
        torch.manual_seed(seed)
        want = step(leaves[1])
        assert torch.equal(got, want), seed
        zeroed = (got == 0).flatten(2).all(-1)  # per channel: all or nothing
        assert zeroed.any() and (~zeroed).any() and ((got == 0).flatten(2).any(-1) == zeroed).all()
        got.sum().backward()
        want.sum().backward()
        assert torch.equal(leaves[0].grad, leaves[1].grad)
    graphs = fe.events()["graphs"]
    assert len(graphs) == 1 and not graphs[0]["runs_in_python"], graphs[0]["note"]


def test_channels_last_cnn_trains_compiled() -> None:
    # A channels_last model and batch: the output layouts come from the meta walk, which needs
    # batch_norm_with_update's row in xjit._eager's table (else the step ran in Python).
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2))
    model = model.to(memory_format=torch.channels_last)
    eager = copy.deepcopy(model)
    x = torch.randn(4, 3, 8, 8).to(memory_format=torch.channels_last)
    got, want = xjit.jit(model)(x), eager(x)
    assert got.is_contiguous(memory_format=torch.channels_last) == want.is_contiguous(
        memory_format=torch.channels_last
    )
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    got.square().mean().backward()
    want.square().mean().backward()
    for (name, a), b in zip(model.named_parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")
    torch.testing.assert_close(model[1].running_var, eager[1].running_var, rtol=1e-5, atol=1e-6)
    graphs = fe.events()["graphs"]
    assert len(graphs) == 1 and not graphs[0]["runs_in_python"], graphs[0]["note"]


def test_backward_reads_saved_activations_in_memory_order() -> None:
    # The forward keeps conv activations channels-last and saves channels-first views of them;
    # the backward takes the buffers themselves (docs/frontend.md "Autograd"), computes the
    # max-pool gradient and the stem's batch-norm gradient channels-last (docs/passes.md,
    # layout), so no kernel runs its general strided version. Before, two did (the stem's
    # batch-norm gradient and the max-pool's first-maximum map). Gradients as eager's.
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1, bias=False),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 8, 3, padding=1, bias=False),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 6, 3, padding=1),
    )
    eager = copy.deepcopy(model)
    x = torch.randn(4, 3, 12, 12)
    compiled = xjit.jit(model)
    before = xjit.ir.backend_stats()["general_versions"]
    for _ in range(2):
        for net, params in ((compiled, model), (eager, eager)):
            params.zero_grad()
            net(x).square().mean().backward()
    assert xjit.ir.backend_stats()["general_versions"] == before
    for (name, a), b in zip(model.named_parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")
    graphs = fe.events()["graphs"]
    assert len(graphs) == 1 and not graphs[0]["runs_in_python"], graphs[0]["note"]


def drop_path(x: Any, w: Any) -> Any:
    # Hugging Face's drop_path: torch.rand with only constant arguments (a PyTorch fallback node
    # with no tensor operand), here before a permute that sends the output layouts to
    # PyTorch's meta kernels: that walk ran the rand on the CPU and shifted eager's stream.
    keep = 0.6
    mask = (keep + torch.rand((x.shape[0], 1, 1), dtype=x.dtype, device=x.device)).floor_()
    return ((x @ w) / keep * mask).permute(2, 0, 1)


@pytest.mark.parametrize("grad", [True, False], ids=["train", "no_grad"])
def test_random_fallback_draws_are_eagers_from_the_first_call(grad: bool) -> None:
    x, w = torch.randn(8, 3, 4), torch.randn(4, 5, requires_grad=True)
    compiled = xjit.jit(drop_path)
    with torch.set_grad_enabled(grad):
        for step in range(2):  # the first call compiles
            torch.manual_seed(step)
            want, want_next = drop_path(x, w), torch.rand(3)
            torch.manual_seed(step)
            got, got_next = compiled(x, w), torch.rand(3)
            assert torch.equal(got_next, want_next), step
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    graphs = fe.events()["graphs"]
    assert len(graphs) == 1 and not graphs[0]["runs_in_python"], graphs[0]["note"]
    assert fe.events()["counters"]["layout_meta_walks"] >= 1  # the walk this test is about


def test_channel_dropout_noise_follows_symbolic_shapes() -> None:
    # dynamic=True: one capture whose noise is [N, C, 1, 1] of each call's N and C (a PyTorch
    # fallback on a symbolic shape was a graph break).
    def step(x: Any) -> Any:
        return F.dropout2d(x * 2.0, 0.4, True)

    compiled = xjit.jit(step, dynamic=True)
    for shape in [(2, 3, 4, 5), (3, 4, 5, 6), (4, 6, 2, 3)]:  # (distinct: no duck sizing)
        x = torch.randn(shape)
        torch.manual_seed(1)
        want, want_next = step(x), torch.rand(2)
        torch.manual_seed(1)
        got, got_next = compiled(x), torch.rand(2)
        assert torch.equal(got, want) and torch.equal(got_next, want_next), shape
    events = fe.events()
    assert not events["breaks"] and len(events["graphs"]) == 1, events["breaks"]
