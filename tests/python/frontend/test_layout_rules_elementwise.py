"""The static layout rules (src/frontend/output_layout.cpp, docs/frontend.md *Output layouts*)
give elementwise results the strides eager's TensorIterator gives them, broadcasting and mixed
operand orders included, without PyTorch's meta kernels: random elementwise programs over
permuted, transposed, sliced, selected, expanded and unsqueezed operands (size-1 dims among
them) must return eager's strides and values, and no capture may run the meta walk
(`layout_meta_walks`)."""

from __future__ import annotations

import itertools
import random
import warnings
from typing import Any

import pytest

torch = pytest.importorskip("torch")
fe = pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from frontend_fixtures import clean, counters  # noqa: E402, F401 (autouse fixture)

PROGRAMS = 120


def dense_in_order(sizes: list[int], order: list[int]) -> torch.Tensor:
    """A dense tensor of `sizes` whose memory is laid out in dim order `order`."""
    base = torch.randn([sizes[d] for d in order])
    return base.permute([order.index(d) for d in range(len(sizes))])


def operand(rng: random.Random, name: str, shape: list[int]) -> tuple[str, torch.Tensor]:
    """An expression over input `name` (a dense input in a random dim order) that gives a tensor
    broadcastable to `shape`, through one kind of view, and that input."""
    sizes = [1 if rng.random() < 0.3 else n for n in shape]
    if rng.random() < 0.3:
        sizes = sizes[rng.randrange(len(sizes)) :]  # fewer dims: broadcast from the left
    rank = len(sizes)
    kind = rng.choice(["dense", "transpose", "narrow", "select", "expand", "unsqueeze"])
    expr = name
    if kind == "transpose" and rank >= 2:
        a, b = rng.sample(range(rank), 2)
        sizes[a], sizes[b] = sizes[b], sizes[a]
        expr = f"{name}.transpose({a}, {b})"
        sizes_in = list(sizes)
        sizes[a], sizes[b] = sizes[b], sizes[a]
    elif kind == "narrow":
        d = rng.randrange(rank)
        start = rng.randrange(3)
        sizes_in = list(sizes)
        sizes_in[d] = sizes[d] + start + rng.randrange(2)
        expr = f"{name}.narrow({d}, {start}, {sizes[d]})"
    elif kind == "select":
        d = rng.randrange(rank + 1)
        sizes_in = sizes[:d] + [3] + sizes[d:]
        expr = f"{name}.select({d}, {rng.randrange(3)})"
    elif kind == "expand":
        sizes_in = list(sizes)
        full = shape[len(shape) - rank :]
        expr = f"{name}.expand({', '.join(map(str, full))})"
    elif kind == "unsqueeze" and 1 in sizes:
        d = sizes.index(1)
        sizes_in = sizes[:d] + sizes[d + 1 :]
        expr = f"{name}.unsqueeze({d})"
    else:
        sizes_in = list(sizes)
    order = list(range(len(sizes_in)))
    rng.shuffle(order)
    return expr, dense_in_order(sizes_in, order)


BINARY = ["{a} * {b}", "{a} + {b}", "{a} - {b}", "torch.maximum({a}, {b})",
          "torch.where({a} > 0, {a}, {b})"]
UNARY = ["torch.exp({a})", "-{a}", "torch.relu({a})", "{a} * 2", "{a} ** 2", "{a}.double()",
         "{a}.flatten() * 3", "torch.cat([{a}, {a}], -1) + 1"]


def program(seed: int) -> tuple[str, list[torch.Tensor]]:
    rng = random.Random(seed)
    shape = [rng.choice([1, 2, 3, 4]) if rng.random() < 0.25 else rng.choice([2, 3, 4, 5])
             for _ in range(rng.randint(2, 4))]
    names = [f"x{i}" for i in range(rng.randint(1, 3))]
    exprs, inputs = zip(*(operand(rng, n, shape) for n in names))
    lines = [f"    v0 = {exprs[0]}"]
    for i, e in enumerate(exprs[1:], 1):
        lines.append(f"    v{i} = " + rng.choice(BINARY).format(a=f"v{i - 1}", b=e))
    last = f"v{len(exprs) - 1}"
    if len(exprs) == 1 or rng.random() < 0.5:  # (at least one elementwise op)
        lines.append("    u = " + rng.choice(UNARY).format(a=last))
        last = "u"
    if rng.random() < 0.3:  # a reshape-like view (or copy) of a result in any order, reused
        lines.append(f"    r = {last}.transpose(0, -1).reshape(-1, {last}.shape[0]) + 1")
        last = "r"
    # (A view of an input as an output needs its exact strides: the meta walk, by design.)
    outs = [last] + ([f"torch.sigmoid({exprs[0]})"] if rng.random() < 0.2 else [])
    src = f"def f({', '.join(names)}):\n" + "\n".join(lines) + f"\n    return {', '.join(outs)}\n"
    return src, list(inputs)


def tensors(value: Any) -> list[torch.Tensor]:
    return list(value) if isinstance(value, tuple) else [value]


@pytest.mark.parametrize("block", range(4))
def test_random_elementwise_programs_match_eager_without_the_meta_walk(block: int) -> None:
    for seed in range(block * PROGRAMS // 4, (block + 1) * PROGRAMS // 4):
        src, inputs = program(seed)
        scope: dict[str, Any] = {"torch": torch}
        exec(compile(src, f"<layout program {seed}>", "exec"), scope)
        f = scope["f"]
        want = tensors(f(*inputs))
        with warnings.catch_warnings():
            warnings.simplefilter("error", xjit.XjitWarning)
            got = tensors(xjit.jit(f, backend="interp")(*inputs))
        where = f"seed {seed}:\n{src}inputs {[(t.shape, t.stride()) for t in inputs]}"
        for g, w in zip(got, want, strict=True):
            assert g.stride() == w.stride(), f"strides {g.stride()} != eager's {w.stride()}, {where}"
            torch.testing.assert_close(g, w)
        c = counters()
        assert c["frames_in_python"] == 0, where
        assert c["layout_meta_walks"] == 0, f"the rules stopped, {where}"
        fe.reset()


def test_meta_walk_counter_counts_where_the_rules_stop() -> None:
    # An op the rules do not follow (an output that is a diagonal of a computed tensor): the
    # meta walk decides, and the counter says so.
    f = xjit.jit(lambda x: (x * 2).diagonal(), backend="interp")
    x = torch.randn(3, 4)
    assert f(x).stride() == (x * 2).diagonal().stride()
    assert counters()["layout_meta_walks"] == 1


def test_llama_layouts_without_the_meta_walk() -> None:
    # Hugging Face LLaMA (small config): its rotary embedding multiplies a transposed q by a
    # broadcast cos, rotate_half concatenates slices, repeat_kv reshapes an expand; the rules
    # follow all of it, with eager's strides for every output.
    pytest.importorskip("transformers")
    import test_models

    model, args, kwargs = test_models.build("llama")
    with torch.no_grad():
        want = test_models.tensors(model(*args, **kwargs))
        got = test_models.tensors(xjit.jit(model)(*args, **kwargs))
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.stride() == w.stride()
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    c = counters()
    assert c["frames_in_python"] == 0
    assert c["layout_meta_walks"] == 0


def test_random_elementwise_programs_with_symbolic_sizes() -> None:
    # The rules over symbolic sizes (stride ranks without exact strides; views of symbolic
    # sizes of static tensors): no crash, eager's values. (Strides are not compared: where the
    # graph drops a reshape to the same shape or specializes an expand's sizes, the strides of
    # size-1 dims can differ from eager's; docs/frontend.md.)
    for seed in range(40):
        src, inputs = program(seed)
        scope: dict[str, Any] = {"torch": torch}
        exec(compile(src, f"<layout program {seed}>", "exec"), scope)
        f = scope["f"]
        want = tensors(f(*inputs))
        got = tensors(xjit.jit(f, backend="interp", dynamic=True)(*inputs))
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w)
        assert counters()["frames_in_python"] == 0, f"seed {seed}:\n{src}"
        fe.reset()


@pytest.mark.parametrize(
    "name,fn",
    [
        ("step_slice_mul", lambda x, y: x[..., ::2] * y[..., :1]),
        ("odd_step_slice_add", lambda x, y: x[:, 1::2] + 1),
        ("step_slices_of_a_transpose", lambda x, y: x.transpose(1, 2)[:, ::2] - y.transpose(1, 2)[:, 1::2]),
        ("rotate_every_two", lambda x, y: torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2) * y),
    ],
)
def test_elementwise_over_step_slices(name: str, fn: Any) -> None:
    # A step slice of static sizes: its exact strides rank its dims for TensorIterator's order
    # (GPT-J's rotary embedding; the rules stopped at the first elementwise op of one).
    x, y = torch.randn(2, 6, 8), torch.randn(2, 6, 8)
    want, got = fn(x, y), xjit.jit(fn)(x, y)
    assert got.stride() == want.stride(), f"{name}: strides {got.stride()} != eager's {want.stride()}"
    torch.testing.assert_close(got, want)
    assert counters()["layout_meta_walks"] == 0, name


def _rotary_of_split_pieces(k: Any, sc: Any) -> Any:  # GPT-J's apply_rotary_pos_emb
    sin, cos = torch.split(sc * 1, 2, dim=-1)
    s = torch.repeat_interleave(sin[:, :, None, :], 2, 3)
    c = torch.repeat_interleave(cos[:, :, None, :], 2, 3)
    rotated = torch.stack((-k[..., 1::2], k[..., ::2]), dim=-1).flatten(-2)
    return k * c + rotated * s


def _repeat_kv_of_a_transposed_slice(k: Any, sc: Any) -> Any:  # Phi-3's repeat_kv
    kv = k.reshape(1, 6, 16)[..., 4:12].view(1, 6, 2, 4).transpose(1, 2)
    return kv[:, :, None, :, :].expand(1, 2, 2, 6, 4).reshape(1, 4, 6, 4) * sc[:, None, :, :]


@pytest.mark.parametrize(
    "name,fn",
    [
        ("unsqueezed_piece", lambda k, sc: sc.split(2, -1)[1][:, :, None, :] * k[..., :2]),
        ("reshaped_piece", lambda k, sc: sc.chunk(2, -1)[0].reshape(1, 6, 1, 2) * k[..., 1:3]),
        ("squeezed_piece", lambda k, sc: sc[:, :, None, :].split(2, -1)[0].squeeze(2) + k[:, :, 0, :2]),
        ("flattened_slice", lambda k, sc: k[..., :2].flatten(-2) * sc.repeat(1, 1, 2)),
        ("rotary_of_split_pieces", _rotary_of_split_pieces),
        ("repeat_kv_of_a_transposed_slice", _repeat_kv_of_a_transposed_slice),
        ("squeezed_transposed_slice", lambda k, sc: k[:, :1, :, :2].transpose(1, 2).squeeze(2) * sc[:, :4, None, 0]),
        ("unsqueezed_transposed_slice", lambda k, sc: k[..., 1:3].transpose(1, 2).unsqueeze(0) + 1),
    ],
)
def test_elementwise_over_views_of_strided_values(name: str, fn: Any) -> None:
    # A view (unsqueeze, reshape, squeeze, flatten) of a strided value of static sizes has known
    # strides, which the op reading it compares with its other operands' (GPT-J's rotary
    # embedding of split pieces of a gathered table, Phi-3's repeat_kv of a transposed slice of
    # its fused projection went to the meta walk before session 27).
    k, sc = torch.randn(1, 6, 4, 4), torch.randn(1, 6, 4)
    want, got = fn(k, sc), xjit.jit(fn)(k, sc)
    assert got.stride() == want.stride(), f"{name}: strides {got.stride()} != eager's {want.stride()}"
    torch.testing.assert_close(got, want)
    assert counters()["layout_meta_walks"] == 0, name


def _laid_out(sizes: list[int], order: tuple[int, ...], seed: int) -> Any:
    g = torch.Generator().manual_seed(seed)
    return torch.randn([sizes[d] for d in order], generator=g).permute([order.index(d) for d in range(len(sizes))])


@pytest.mark.parametrize("rank", [3, 4])
def test_stack_layouts_follow_cat_of_the_unsqueezed_inputs(rank: int) -> None:
    # ATen's stack is a cat of `t.unsqueeze(dim)`: channels-last where every unsqueezed input
    # suggests it, else contiguous (Cohere's rotate_half stacks step slices of a transposed
    # tensor: the meta walk before session 27). Every dim order of the inputs (both alike and
    # the second contiguous), a step slice, every stack dim; exact strides against eager.
    sizes = [2, 3, 4, 5][:rank]
    for order in itertools.permutations(range(rank)):
        for dim in [*range(rank + 1), -1]:
            for second in ("same", "contiguous", "step"):

                def fn(a: Any, b: Any) -> Any:
                    if second == "step":
                        b = b[..., ::2]
                    return torch.stack([a * 2, b], dim=dim)

                a = _laid_out(sizes, order, 1)
                b = {
                    "same": _laid_out(sizes, order, 2),
                    "contiguous": torch.randn(sizes),
                    "step": torch.randn([*sizes[:-1], 2 * sizes[-1]]),
                }[second]
                want, got = fn(a, b), xjit.jit(fn)(a, b)
                where = f"order {order}, dim {dim}, second {second}"
                assert got.stride() == want.stride(), f"{where}: {got.stride()} != eager's {want.stride()}"
                torch.testing.assert_close(got, want)
                assert counters()["layout_meta_walks"] == 0, where
                fe.reset()


def _shift_tokens_right(ids: Any) -> Any:  # BART's, on a batch of one
    shifted = ids.new_zeros(ids.shape)
    shifted[:, 1:] = ids[:, :-1].clone()
    shifted[:, 0] = 2
    return shifted.masked_fill(shifted == -100, 1)


def _position_bias(table: Any) -> Any:  # MPNet's: an expand of a permuted table, contiguous()
    values = (table * 2).permute([2, 0, 1]).unsqueeze(0)
    return values.expand((2, -1, 5, 5)).contiguous()


@pytest.mark.parametrize(
    "name,fn,make",
    [
        ("clone_of_a_batch_of_one_slice", _shift_tokens_right, lambda: torch.randint(0, 9, (1, 12))),
        ("clone_of_a_batch_of_one_slice_times_two", lambda x: x[:, :-1].clone() * 2, lambda: torch.randn(1, 12)),
        ("contiguous_of_an_expand", _position_bias, lambda: torch.randn(5, 5, 4)),
        ("contiguous_of_a_contiguous_slice", lambda x: x[:, :3].contiguous() + 1, lambda: torch.randn(1, 8, 4)),
        ("contiguous_of_a_step_slice", lambda x: x[..., ::2].contiguous() * 3, lambda: torch.randn(2, 3, 8)),
    ],
)
def test_copies_of_strided_values(name: str, fn: Any, make: Any) -> None:
    # clone keeps the strides of a non-overlapping and dense value (those of its size-1 dims
    # too: `ids[:, :-1]` of a batch of one), contiguous() returns a value ATen calls contiguous
    # as it is and copies the others (BART's shift_tokens_right and MPNet's position bias went
    # to the meta walk before session 27).
    x = make()
    want, got = fn(x), xjit.jit(fn)(x)
    assert got.stride() == want.stride(), f"{name}: strides {got.stride()} != eager's {want.stride()}"
    torch.testing.assert_close(got, want)
    assert counters()["layout_meta_walks"] == 0, name
