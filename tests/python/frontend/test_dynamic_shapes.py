"""Dynamic shapes end to end: `dynamic=True` (symbolic dims from the first capture) and
`dynamic=None` (automatic: static first, the dims that changed become symbolic after the first
size-related recompile), on the native backend. One capture must serve several input sizes
(counted with the frontend's compile counter), outputs must equal eager, and no frame may fall
back to Python (which would hide a backend failure behind a correct answer)."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
fe = pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from frontend_fixtures import clean, counters  # noqa: E402, F401 (autouse fixture)

REPO = Path(__file__).resolve().parents[3]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
from bench import models as bench_models  # noqa: E402

nn = torch.nn


def run_sizes(compiled: nn.Module, model: nn.Module, inputs: list[torch.Tensor]) -> None:
    """Calls compiled and eager on each input; fails on any xjit warning (a fallback)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", xjit.XjitWarning)
        with torch.no_grad():
            for x in inputs:
                got, want = compiled(x), model(x)
                assert got.shape == want.shape
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_resnet18_one_graph_for_several_image_sizes() -> None:
    # Strided convs and pools give output sizes such as (s1+1)//2; the generated kernels after
    # them (batch-norm epilogues, relu, residual adds) must size their outputs from those. The
    # first input is not square, so height and width get symbols of their own.
    torch.manual_seed(0)
    model = bench_models.ResNet18(num_classes=10).eval()
    compiled = xjit.jit(model, backend="xjit", dynamic=True)
    shapes = [(2, 3, 64, 80), (2, 3, 64, 64), (2, 3, 96, 96), (3, 3, 112, 112), (2, 3, 72, 48)]
    run_sizes(compiled, model, [torch.randn(*s) for s in shapes])
    assert counters()["compiles"] == 1
    assert counters()["frames_in_python"] == 0


class ConvNet(nn.Module):
    """Strided conv, pool and a broadcast against a per-channel parameter: odd sizes give floor
    divisions that do not cancel ((s+1)//2, then ((s+1)//2-1)//2+1 ...)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.scale = nn.Parameter(torch.randn(1, 8, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(x)) * self.scale
        return torch.sigmoid(self.pool(y) + 1)


def test_conv_pool_chain_with_odd_sizes() -> None:
    torch.manual_seed(2)
    model = ConvNet().eval()
    compiled = xjit.jit(model, backend="xjit", dynamic=True)
    run_sizes(compiled, model, [torch.randn(2, 3, s, s + 2) for s in (9, 16, 23)])
    assert counters()["compiles"] == 1


@pytest.mark.parametrize("backend", ["xjit", "eager"])
def test_automatic_dynamic_after_the_first_size_change(backend: str) -> None:
    # dynamic=None, like torch.compile's automatic dynamic: the first capture is static; the
    # first size change recompiles with the changed dim symbolic; later sizes reuse it.
    torch.manual_seed(3)
    model = bench_models.MLP((24, 32, 10)).eval()
    compiled = xjit.jit(model, backend=backend)
    run_sizes(compiled, model, [torch.randn(b, 24) for b in (3, 4, 7, 2, 9)])
    assert counters()["compiles"] == 2
    # A change in a dim that was static (the feature size) is a different program: it fails
    # the weights' shapes in eager too, so only the batch dim is exercised here.


def test_automatic_dynamic_keeps_unchanged_dims_static() -> None:
    # Only the dim that changed becomes symbolic: a change in another dim recompiles again.
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * 2 + x.sum(dim=1, keepdim=True)

    compiled = xjit.jit(f, backend="xjit")
    with torch.no_grad():
        for shape in ((3, 5), (4, 5), (6, 5)):
            x = torch.randn(*shape)
            torch.testing.assert_close(compiled(x), f(x))
        assert counters()["compiles"] == 2
        x = torch.randn(6, 7)
        torch.testing.assert_close(compiled(x), f(x))
        assert counters()["compiles"] == 3


class Heads(nn.Module):
    """Multi-head attention as HF writes it: view(b, s, -1, head_dim) of a [b, s, hidden] tensor
    with b and s symbolic (the static hidden dim is split into (-1, head_dim))."""

    def __init__(self, hidden: int = 32, head_dim: int = 8) -> None:
        super().__init__()
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)
        self.head_dim = head_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden_shape = (*x.shape[:-1], -1, self.head_dim)
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (t.view(hidden_shape).transpose(1, 2) for t in (q, k, v))
        w = torch.softmax(q @ k.transpose(-1, -2) / self.head_dim**0.5, dim=-1)
        y = (w @ v).transpose(1, 2).reshape(*x.shape[:-1], -1)
        return self.out(y)


@pytest.mark.parametrize("backend", ["xjit", "eager"])
def test_head_split_view_keeps_batch_and_sequence_symbolic(backend: str) -> None:
    torch.manual_seed(4)
    model = Heads().eval()
    compiled = xjit.jit(model, backend=backend, dynamic=True)
    run_sizes(compiled, model, [torch.randn(b, s, 32) for b, s in ((2, 7), (3, 12), (2, 5))])
    assert counters()["compiles"] == 1


def test_expand_of_a_symbolic_dim_to_a_fixed_size_specializes_it() -> None:
    # x.expand(3, 1, 5): dims 0 and 2 must be 3 (or 1) and 5, so they are static in the graph;
    # another size reaches eager's error from Python, not an internal error from the graph.
    def f(x: torch.Tensor) -> torch.Tensor:
        return x.expand(3, 1, 5) * 2

    compiled = xjit.jit(f, dynamic=True)
    x = torch.randn(3, 1, 5)
    torch.testing.assert_close(compiled(x), f(x))
    with warnings.catch_warnings():
        warnings.simplefilter("error", xjit.XjitWarning)
        with pytest.raises(RuntimeError, match="must match the existing size"):
            compiled(torch.randn(4, 1, 5))
