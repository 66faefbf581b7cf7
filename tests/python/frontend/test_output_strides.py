"""Compiled graphs hand back their outputs in the layout eager gives them (docs/frontend.md,
*Output layouts*): same strides, so programs that observe strides (`.stride()`,
`.is_contiguous()`, `.view()` raising, `reshape` copying or not) behave as in eager. Each case
compares strides and values with eager, on every backend, and no frame may fall back to Python
(a fallback would hide a missing layout behind a correct answer)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
fe = pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from frontend_fixtures import check_layouts, clean, counters  # noqa: E402, F401 (autouse fixture)

nn = torch.nn
F = torch.nn.functional
BACKENDS = ["xjit", "eager", "interp"]


def run_both(fn: Callable[..., Any], *args: torch.Tensor, backend: str = "xjit") -> Any:
    want = fn(*args)
    with warnings.catch_warnings():
        warnings.simplefilter("error", xjit.XjitWarning)
        got = xjit.jit(fn, backend=backend)(*args)
    check_layouts(got, want)
    assert counters()["frames_in_python"] == 0
    return got


def permuted(*sizes: int, order: tuple[int, ...]) -> torch.Tensor:
    """A dense tensor of `sizes` whose memory is laid out in dim order `order`."""
    base = torch.randn(*[sizes[d] for d in order])
    inverse = [order.index(d) for d in range(len(sizes))]
    return base.permute(*inverse)


CASES: dict[str, tuple[Callable[..., Any], Callable[[], list[torch.Tensor]]]] = {
    "transposed_mul": (lambda x: x.t() * 2, lambda: [torch.randn(3, 4)]),
    "permuted_unary": (lambda x: torch.exp(x) + 1, lambda: [permuted(2, 3, 4, order=(2, 0, 1))]),
    "sliced_unary": (lambda x: torch.relu(x[:, ::2]), lambda: [torch.randn(4, 6)]),
    "expanded_input": (lambda x: x.expand(3, 4) * 2, lambda: [torch.randn(1, 4)]),
    "mixed_binary": (lambda a, b: a + b, lambda: [torch.randn(4, 3).t(), torch.randn(3, 4)]),
    "mixed_binary_tie": (
        lambda a, b: a * b,
        lambda: [torch.randn(3, 4), torch.randn(4, 3).t()],
    ),
    "broadcast_permuted": (
        lambda a, b: a - b,
        lambda: [permuted(2, 3, 4, order=(0, 2, 1)), torch.randn(4)],
    ),
    "clone_permuted": (lambda x: x.t().clone(), lambda: [torch.randn(3, 4)]),
    "likes_permuted": (
        lambda x: (torch.empty_like(x).fill_(1), torch.zeros_like(x), torch.ones_like(x) + x),
        lambda: [permuted(2, 3, 4, order=(2, 1, 0))],
    ),
    "sum_permuted": (lambda x: x.sum(0) * 2, lambda: [permuted(2, 3, 4, order=(2, 0, 1))]),
    "sum_keepdim_permuted": (
        lambda x: x.sum(1, keepdim=True),
        lambda: [permuted(2, 3, 4, order=(2, 0, 1))],
    ),
    "softmax_transposed": (lambda x: torch.softmax(x.t(), dim=-1), lambda: [torch.randn(5, 4)]),
    "matmul_transposed": (lambda a, b: a.t() @ b, lambda: [torch.randn(4, 3), torch.randn(4, 5)]),
    "linear_transposed": (
        lambda x, w: F.linear(x.t(), w),
        lambda: [torch.randn(8, 2), torch.randn(5, 8)],
    ),
    "view_of_input": (lambda x: x.t()[1:], lambda: [torch.randn(3, 4)]),
    "expanded_output": (lambda x: (x[0] * 2).expand(5, 4), lambda: [torch.randn(3, 4)]),
    "transposed_back": (lambda x: (x.t() * 2).t(), lambda: [torch.randn(3, 4)]),
    "strided_slice_of_computed": (lambda x: (x.t() * 2)[1:, ::2], lambda: [torch.randn(6, 4)]),
    "size1_transposed": (lambda x, y: (x.t() * 2, y.t() + 1), lambda: [torch.randn(3, 1), torch.randn(1, 4)]),
    "slice_then_mul": (lambda x: x[:, 1:] * 2, lambda: [torch.randn(4, 6)]),
    "select_of_permuted": (lambda x: x.permute(2, 0, 1)[1] + 1, lambda: [torch.randn(2, 3, 4)]),
    "matmul_then_transpose": (lambda a, b: (a @ b).transpose(0, 1) * 3, lambda: [torch.randn(3, 4), torch.randn(4, 5)]),
    "fast_setup_size1": (
        lambda x, y: (x.transpose(1, 2) + y.transpose(1, 2)).transpose(0, 1),
        lambda: [torch.randn(3, 1, 5), torch.randn(3, 1, 5)],
    ),
    "cast_transposed": (
        lambda x: (x.transpose(0, 1) * 2).to(torch.float64),
        lambda: [torch.randn(3, 1, 5)],
    ),
    "reshape_of_transposed": (lambda x: (x.t() * 2).reshape(-1, 2), lambda: [torch.randn(4, 6)]),
    # Session 33's sweep of output strides (ops x input layouts against eager): CPU kernels that
    # lay out otherwise than their meta kernels, which decide where the rules stop.
    "pixel_shuffle_channels_last": (
        lambda x: F.pixel_shuffle(x, 2),
        lambda: [torch.randn(2, 8, 4, 6).to(memory_format=torch.channels_last)],
    ),
    "roll_channels_last": (
        lambda x: (x.roll(1, 1), x.roll((1, 2), (2, 3)), x.roll(3)),
        lambda: [torch.randn(2, 8, 4, 6).to(memory_format=torch.channels_last)],
    ),
    "log_sigmoid_permuted": (
        lambda x: F.logsigmoid(x),
        lambda: [permuted(4, 1, 3, order=(2, 1, 0))],
    ),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_output_strides_match_eager(name: str, backend: str) -> None:
    fn, make = CASES[name]
    torch.manual_seed(0)
    run_both(fn, *make(), backend=backend)


def test_contiguous_outputs_stay_contiguous() -> None:
#The common case : contiguous inputs, contiguous outputs, the graph's own buffers.
    got = run_both(lambda x: torch.tanh(x) @ x.t() + 1, torch.randn(4, 4))
    assert got.is_contiguous()


class SmallCnn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = F.relu(self.bn1(self.conv1(x)))
        return y, F.relu(self.conv2(y) + y)


@pytest.mark.parametrize("backend", ["xjit", "eager"])
def test_channels_last_cnn(backend: str) -> None:
    torch.manual_seed(0)
    model = SmallCnn().eval().to(memory_format=torch.channels_last)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    x = torch.randn(2, 3, 8, 8).to(memory_format=torch.channels_last)
    with torch.no_grad():
        want = model(x)
        got = xjit.jit(model, backend=backend)(x)
    check_layouts(got, want)
    for t in got:
        assert t.is_contiguous(memory_format=torch.channels_last)
        assert not t.is_contiguous()
    assert counters()["frames_in_python"] == 0


def reshape_then_fill(x: torch.Tensor) -> torch.Tensor:
    y = x.t() * 2  # eager: strides (1, rows): not contiguous
    y.reshape(-1)[0].fill_(7)  # so reshape copies and y stays unchanged
    return y


@pytest.mark.parametrize("backend", BACKENDS)
def test_reshape_copies_as_in_eager(backend: str) -> None:
    x = torch.randn(3, 4)
    want = reshape_then_fill(x.clone())
    got = xjit.jit(reshape_then_fill, backend=backend)(x.clone())
    assert torch.equal(got, want)
    assert got.stride() == want.stride()


def view_after(x: torch.Tensor) -> torch.Tensor:
    y = x.t() * 2
    return y.view(-1)


def test_view_raises_as_in_eager() -> None:
    x = torch.randn(3, 4)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        view_after(x)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        xjit.jit(view_after)(x)


def test_is_contiguous_as_in_eager() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x.t() + 1

    x = torch.randn(3, 4)
    assert xjit.jit(f)(x).is_contiguous() == f(x).is_contiguous() is False


def test_symbolic_sizes_compile_once() -> None:
    def f(x: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.t() * 2 + b, torch.softmax(x.t(), dim=0)

    compiled = xjit.jit(f, dynamic=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", xjit.XjitWarning)
        for rows in (3, 5, 9):
            x, b = torch.randn(rows, 6), torch.randn(rows)
            check_layouts(compiled(x, b), f(x, b))
    assert counters()["compiles"] == 1
    assert counters()["frames_in_python"] == 0


def test_later_call_with_other_input_layout_recompiles() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x) * 3

    compiled = xjit.jit(f)
    a = torch.randn(4, 5)
    b = torch.randn(5, 4).t()  # same sizes, transposed memory
    check_layouts(compiled(a), f(a))
    check_layouts(compiled(b), f(b))
    check_layouts(compiled(a), f(a))
    assert counters()["compiles"] == 2



def permuted_4d(x: torch.Tensor) -> torch.Tensor:
    return x.permute(0, 2, 3, 1)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: permuted_4d(x).clone(memory_format=torch.contiguous_format) + 0,
        lambda x: (x * 1).contiguous(memory_format=torch.channels_last) + 0,
        lambda x: torch.empty_like(permuted_4d(x), memory_format=torch.contiguous_format).fill_(2),
        lambda x: permuted_4d(x).to(torch.float64, memory_format=torch.contiguous_format) + 0,
        lambda x: torch.empty(2, 3, 4, 5, memory_format=torch.channels_last).fill_(1) + x,
    ],
    ids=["clone", "contiguous", "empty_like", "to", "empty"],
)
def test_explicit_memory_format_as_in_eager(fn: Callable[..., Any]) -> None:
#The capture does not reproduce memory_format = arguments : such a call is a graph break
#and runs in Python, so the layout is eager's own.
    x = torch.randn(2, 3, 4, 5)
    check_layouts(xjit.jit(fn)(x), fn(x))


def test_common_graphs_do_not_need_meta_kernels() -> None:
#Layouts settled by the static rules(contiguous inputs, permutes, slices read by other ops,
#matmuls) do not run PyTorch's meta kernels, whose first use imports torch._dynamo (seconds).
    import subprocess
    import sys

    code = (
        "import sys, torch, xjit\n"
        "def f(x, w):\n"
        "    q = (x @ w).view(2, 4, 2, 3).transpose(1, 2)\n"
        "    s = torch.softmax(q @ q.transpose(-1, -2), -1) @ q\n"
        "    return s.transpose(1, 2).contiguous().reshape(2, 4, 6)[:, 0] * 2, q * 1\n"
        "x, w = torch.randn(2, 4, 5), torch.randn(5, 6)\n"
        "got, want = xjit.jit(f)(x, w), f(x, w)\n"
        "assert [t.stride() for t in got] == [t.stride() for t in want], (got, want)\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "False"


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: F.interpolate(x, scale_factor=2),  # a size-1 dim repeated: expand + reshape
        lambda x: F.interpolate(x, scale_factor=1),  # the identity map
        lambda x: F.interpolate(x, size=x.shape[-1], mode="linear"),
        lambda x: F.interpolate(x.unsqueeze(-1), scale_factor=1, mode="bicubic").squeeze(-1),
    ],
)
def test_interpolate_result_is_fresh(fn: Callable[..., Any]) -> None:
    # Session 33's sweep: nearest upsampling of a size-1 dim came back as a stride-0 view of the
    # input ((4, 1, 0) against eager's (8, 2, 1)), and a map that is the identity (equal sizes,
    # scale 1) as the input itself; a write to either reached the input. Eager's result is a
    # fresh tensor: writing it leaves the input alone.
    x = torch.randn(3, 4, 1)
    want, got_x = fn(x.clone()), x.clone()
    got = run_both(fn, got_x)
    got.add_(1)
    torch.testing.assert_close(got_x, x)
    torch.testing.assert_close(got, want + 1)

