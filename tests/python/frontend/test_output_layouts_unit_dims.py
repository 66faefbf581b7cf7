"""Inputs dense but for the strides of their size-1 dims (`ids[:, :n]` of a batch of one, which
PyTorch calls contiguous) go through the static layout rules, not PyTorch's meta kernels
(docs/frontend.md *Output layouts*): the meta walk imported torch._dynamo, a second or more at
the first such compile. The outputs must have eager's values, eager's strides on every dim of
size > 1 (those of size-1 dims address no element: the fuzzer's cosmetic `stride1` class), and
share the input's memory exactly where eager's do."""

from __future__ import annotations

import itertools
import random
import warnings
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
fe = pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from frontend_fixtures import clean, counters  # noqa: E402, F401 (autouse fixture)

PROGRAMS: dict[str, Callable[[Any], Any]] = {
    "relu": lambda x: torch.relu(x),
    "clone": lambda x: x.clone(),
    "select": lambda x: x[0],
    "unsqueeze": lambda x: (x * 2).unsqueeze(0),
    "transpose_view": lambda x: x.transpose(1, 2),
    "transpose_mul": lambda x: x.transpose(1, 2) * 3,
    "sum_keepdim": lambda x: x.sum(-1, keepdim=True),
    "bmm": lambda x: x @ x.transpose(1, 2),
    "reshape_add": lambda x: x.reshape(-1, x.shape[-1]) + 1,
    "view": lambda x: x.view(-1, x.shape[-1]),
    "step_slice": lambda x: x[:, ::2],
    "zeros_like": lambda x: torch.zeros_like(x),
    "contiguous": lambda x: x.contiguous(),
    "softmax": lambda x: torch.softmax(x, -1),
    "cat": lambda x: torch.cat([x, x], 1),
    "several": lambda x: (x, x + 1, x.permute(2, 0, 1)),
    "in_place": lambda x: x.mul_(2.0),
}


def sliced(kind: str) -> torch.Tensor:
    """A [1, 8, 6]-like input whose size-1 dim's stride is not its dense one."""
    if kind == "batch_of_one":  # [1, 8, 6] of a [1, 32, 6]: strides (192, 6, 1)
        return torch.randn(1, 32, 6)[:, :8]
    if kind == "transposed":  # [1, 8, 6] transposed in memory, its size-1 dim's stride 1000
        return torch.randn(6, 8).t().unsqueeze(0).as_strided((1, 8, 6), (1000, 1, 8))
    # a dense [8, 1, 6] whose size-1 dim has stride 1000
    base = torch.randn(8, 6)
    return base.as_strided((8, 1, 6), (6, 1000, 1))


def check(fn: Callable[[Any], Any], make: Callable[[], torch.Tensor], where: str) -> None:
    x_eager, x_comp = make(), make()
    x_comp.copy_(x_eager)
    assert x_comp.stride() == x_eager.stride()
    want = fn(x_eager)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning
        got = xjit.jit(fn)(x_comp)
    wants = want if isinstance(want, tuple) else (want,)
    gots = got if isinstance(got, tuple) else (got,)
    for g, w in zip(gots, wants, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6, msg=where)
        significant = [(gs, ws) for gs, ws, n in zip(g.stride(), w.stride(), w.shape) if n != 1]
        assert all(gs == ws for gs, ws in significant), (
            f"strides {g.stride()} against eager's {w.stride()} on dims of size > 1, {where}"
        )
        shares = g.untyped_storage().data_ptr() == x_comp.untyped_storage().data_ptr()
        eager_shares = w.untyped_storage().data_ptr() == x_eager.untyped_storage().data_ptr()
        assert shares == eager_shares, f"shares the input's memory: {shares}, eager's {eager_shares}, {where}"
    torch.testing.assert_close(x_comp, x_eager, msg=where)  # in-place writes reached the input


def dense_twin(t: torch.Tensor) -> torch.Tensor:
    """t's values in a tensor dense in t's dim order, its size-1 dims' strides dense ones too."""
    order = sorted(range(t.dim()), key=lambda d: (-t.stride(d), t.shape[d] != 1))
    base = torch.empty([t.shape[d] for d in order]).permute([order.index(d) for d in range(t.dim())])
    return base.copy_(t)


def walks_of(fn: Callable[..., Any], *inputs: torch.Tensor) -> int:
    fe.reset()
    xjit.jit(fn)(*inputs)
    walks = int(counters()["layout_meta_walks"])
    fe.reset()
    return walks


@pytest.mark.parametrize(
    "name,kind", list(itertools.product(PROGRAMS, ["batch_of_one", "transposed", "odd_unit_stride"]))
)
def test_unit_dim_strides_take_the_rules(name: str, kind: str) -> None:
    fn = PROGRAMS[name]
    x = sliced(kind)
    twin = dense_twin(x)
    assert [s for s, n in zip(twin.stride(), twin.shape) if n != 1] == [
        s for s, n in zip(x.stride(), x.shape) if n != 1
    ]
    # As many meta walks as for the dense twin (the rules stop at some ops of permuted inputs).
    assert walks_of(fn, x.clone() if name == "in_place" else x) == walks_of(fn, twin)
    check(fn, lambda: sliced(kind), f"{name} on {kind}")
    assert counters()["frames_in_python"] == 0


def test_sliced_batch_of_one_compiles_without_the_meta_walk() -> None:
    # The case users meet: a linear model over `x[:, :n]` of a batch of one.
    lin = torch.nn.Linear(6, 5)
    check(lambda x: torch.relu(lin(x)) * 2, lambda: sliced("batch_of_one"), "linear")
    assert counters()["layout_meta_walks"] == 0


def test_random_unit_dim_strides() -> None:
    # Dense inputs in a random dim order with random strides on their size-1 dims, through a
    # few elementwise and view programs: eager's values and significant strides, and no more
    # meta walks than for the dense twin.
    rng = random.Random(7)
    programs = [
        lambda x, y: x * y + 1,
        lambda x, y: (x + y).transpose(0, -1),
        lambda x, y: torch.where(x > 0, x, y).sum(0, keepdim=True),
        lambda x, y: (x.exp(), y.transpose(0, 1) - 1),
    ]
    for case in range(24):
        sizes = [rng.choice([1, 1, 3, 4]) for _ in range(rng.randint(2, 4))]
        if all(n == 1 for n in sizes):
            sizes[0] = 5
        order = list(range(len(sizes)))
        rng.shuffle(order)

        def make(sizes: list[int] = sizes, order: list[int] = order, seed: int = case) -> torch.Tensor:
            g = torch.Generator().manual_seed(seed)
            base = torch.randn([sizes[d] for d in order], generator=g)
            t = base.permute([order.index(d) for d in range(len(sizes))])
            strides = [s if n != 1 else 977 for s, n in zip(t.stride(), sizes)]
            return t.as_strided(sizes, strides)

        def fn(x: torch.Tensor, p: Callable[..., Any] = programs[case % len(programs)]) -> Any:
            return p(x, x * 0.5)

        where = f"case {case}: sizes {sizes}, order {order}"
        assert walks_of(fn, make()) == walks_of(fn, dense_twin(make())), where
        check(fn, make, where)
        fe.reset()
