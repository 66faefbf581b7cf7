"""Outputs that are strided views of computed tensors (`h[:, -1]`, a split piece, a transposed
slice) get eager's exact strides and storage offset from the static layout rules
(src/frontend/output_layout.cpp, `LayoutWalk::offsetOf`), without PyTorch's meta walk (a first
call of ~1.2 s where `torch._dynamo` is not imported yet): fixed programs, and random chains of
views over a tensor computed in a random dim order, checked against eager's strides, offsets,
values and memory sharing."""

from __future__ import annotations

import random
import warnings
from typing import Any

import pytest

torch = pytest.importorskip("torch")
fe = pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from frontend_fixtures import clean, counters  # noqa: E402, F401 (autouse fixture)


def _tensors(value: Any) -> list[torch.Tensor]:
    return list(value) if isinstance(value, tuple) else [value]


def _dense(t: torch.Tensor) -> bool:
    """ATen's is_non_overlapping_and_dense: the dims of size > 1, by stride, are compact."""
    expected = 1
    for stride, n in sorted((st, n) for n, st in zip(t.shape, t.stride()) if n != 1):
        if stride != expected:
            return False
        expected *= n
    return True


def _check_like_eager(fn: Any, inputs: list[torch.Tensor], where: str, offsets: bool = True) -> None:
    want = _tensors(fn(*inputs))
    with warnings.catch_warnings():
        warnings.simplefilter("error", xjit.XjitWarning)
        got = _tensors(xjit.jit(fn)(*inputs))
    assert len(got) == len(want), where
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.shape == w.shape, where
        assert g.stride() == w.stride(), f"output {k}: strides {g.stride()} != eager's {w.stride()}, {where}"
        # The offset of a strided output (an Exact layout); a dense one, eager's own or a
        # contiguous() copy, may be a view at an offset of a larger result of the graph's
        # (values, strides and sharing as eager's), and an empty one addresses nothing.
        assert not offsets or w.numel() == 0 or _dense(w) or g.storage_offset() == w.storage_offset(), (
            f"output {k}: offset {g.storage_offset()} != eager's {w.storage_offset()}, {where}"
        )
        torch.testing.assert_close(g, w, msg=lambda m: f"output {k}: {m}, {where}")
    # The same outputs share storage as in eager.
    for i in range(len(want)):
        for j in range(i + 1, len(want)):
            if want[i].numel() == 0 or want[j].numel() == 0:
                continue
            same_w = want[i].untyped_storage().data_ptr() == want[j].untyped_storage().data_ptr()
            same_g = got[i].untyped_storage().data_ptr() == got[j].untyped_storage().data_ptr()
            assert same_g == same_w, f"outputs {i} and {j} share storage: {same_g}, eager's {same_w}, {where}"


FIXED = [
    ("last_step", lambda x: torch.tanh(x @ x.transpose(-1, -2))[:, -1]),
    ("cls_token_and_sequence", lambda x: (lambda h: (h, h[:, 0, :]))(torch.relu(x) * 2)),
    ("slice_of_the_last_dim", lambda x: x.sin()[..., 1:3]),
    ("transposed_slice", lambda x: x.cos()[:, 2:5].transpose(0, 1)),
    ("negative_select", lambda x: (x * 3).select(1, -2)),
    ("narrow", lambda x: (x + 1).narrow(2, 1, 3)),
    ("step_slice", lambda x: (x * 2)[:, ::2]),
    ("step_slice_from_1", lambda x: (x * 2)[1:, 1::2]),
    ("split_piece", lambda x: x.exp().split(2, -1)[1]),
    ("chunk_piece_unsqueezed", lambda x: x.exp().chunk(3, 1)[-1].unsqueeze(0)),
    ("unbind_piece", lambda x: x.abs().unbind(1)[3]),
    ("expanded_select", lambda x: (x - 1)[:, 0].expand(3, -1, -1)),
    ("two_pieces_of_one_tensor", lambda x: (lambda h: (h[0, 1:], h[1, :-1]))(x.sigmoid())),
    ("slice_of_a_permuted_result", lambda x: (x.permute(2, 0, 1) * 2)[1:3]),
    # eager copies h twice (transposed: contiguous() and reshape copy) and views one copy; the
    # graph, computing h (no output) contiguous, views h three times: moved apart after the
    # run, the copy's view onto the copy
    (
        "two_copies_and_a_view_of_one",
        lambda x: (lambda h: (lambda b: (h.contiguous(), b, b[1:]))(h.reshape(-1)))(x.transpose(1, 2) * 2),
    ),
]


@pytest.mark.parametrize("name,fn", FIXED, ids=[n for n, _ in FIXED])
def test_strided_view_outputs_without_the_meta_walk(name: str, fn: Any) -> None:
    _check_like_eager(fn, [torch.randn(2, 5, 6)], name)
    assert counters()["layout_meta_walks"] == 0, name


def _view_chain(rng: random.Random, sizes: list[int]) -> tuple[str, list[int]]:
    """A random chain of views (as Python text over `h`) and the sizes it ends with."""
    expr, sizes = "h", list(sizes)
    for _ in range(rng.randint(1, 3)):
        rank = len(sizes)
        kind = rng.choice(["slice", "step", "select", "narrow", "split", "unbind", "transpose",
                           "unsqueeze", "squeeze", "expand", "reshape", "contiguous", "flatten"])
        d = rng.randrange(rank) if rank else 0
        if kind == "slice" and rank and sizes[d] > 1:
            start = rng.randrange(-sizes[d], sizes[d] - 1)
            idx = [":"] * rank
            idx[d] = f"{start}:"
            expr += f"[{', '.join(idx)}]"
            sizes[d] = sizes[d] - start % sizes[d]
        elif kind == "step" and rank and sizes[d] > 2:
            idx = [":"] * rank
            start = rng.randrange(2)
            idx[d] = f"{start}::2"
            expr += f"[{', '.join(idx)}]"
            sizes[d] = (sizes[d] - start + 1) // 2
        elif kind == "select" and rank > 1:
            i = rng.randrange(-sizes[d], sizes[d])
            expr += f".select({d}, {i})"
            del sizes[d]
        elif kind == "narrow" and rank and sizes[d] > 1:
            start = rng.randrange(sizes[d] - 1)
            n = rng.randint(1, sizes[d] - start)
            expr += f".narrow({d}, {start}, {n})"
            sizes[d] = n
        elif kind == "split" and rank and sizes[d] > 1:
            k = rng.randint(1, sizes[d] - 1)
            pieces = [k] * (sizes[d] // k) + ([sizes[d] % k] if sizes[d] % k else [])
            i = rng.randrange(len(pieces))
            expr += f".split({k}, {d})[{i}]"
            sizes[d] = pieces[i]
        elif kind == "unbind" and rank > 1:
            i = rng.randrange(sizes[d])
            expr += f".unbind({d})[{i}]"
            del sizes[d]
        elif kind == "transpose" and rank > 1:
            a, b = rng.sample(range(rank), 2)
            expr += f".transpose({a}, {b})"
            sizes[a], sizes[b] = sizes[b], sizes[a]
        elif kind == "unsqueeze":
            d = rng.randrange(rank + 1)
            expr += f".unsqueeze({d})"
            sizes.insert(d, 1)
        elif kind == "squeeze" and 1 in sizes:
            d = sizes.index(1)
            expr += f".squeeze({d})"
            del sizes[d]
        elif kind == "expand" and rank and 1 in sizes:
            d = sizes.index(1)
            sizes[d] = 3
            expr += f".expand({', '.join(map(str, sizes))})"
        elif kind == "reshape" and rank > 1:
            n = sizes[0] * sizes[1]
            expr += f".reshape({', '.join(map(str, [n] + sizes[2:]))})"
            sizes = [n] + sizes[2:]
        elif kind == "contiguous":
            expr += ".contiguous()"
        elif kind == "flatten" and rank > 1:
            expr += ".flatten()"
            n = 1
            for s in sizes:
                n *= s
            sizes = [n]
    return expr, sizes


@pytest.mark.parametrize("block", range(4))
def test_random_view_chains_of_computed_tensors(block: int) -> None:
    walks = 0
    for seed in range(block * 60, (block + 1) * 60):
        rng = random.Random(seed)
        sizes = [rng.randint(2, 5) for _ in range(rng.randint(2, 4))]
        order = list(range(len(sizes)))
        rng.shuffle(order)
        outs = [_view_chain(rng, sizes)[0] for _ in range(rng.randint(1, 2))]
        if rng.random() < 0.3:
            outs.append("h")
        src = f"def f(x):\n    h = torch.sin(x) * 2\n    return ({', '.join(outs)},)\n"
        scope: dict[str, Any] = {"torch": torch}
        exec(compile(src, f"<view chain {seed}>", "exec"), scope)
        x = torch.randn([sizes[d] for d in order]).permute([order.index(d) for d in range(len(sizes))])
        # (Offsets not compared: a base computed in the dim order that gives its views eager's
        # strides on their dims of size > 1 may put a view's first element elsewhere; values,
        # strides and sharing are eager's.)
        where = f"seed {seed}:\n{src}input {tuple(x.shape)} {x.stride()}"
        _check_like_eager(scope["f"], [x], where, offsets=False)
        walks += counters()["layout_meta_walks"]
        fe.reset()
    assert walks == 0, f"{walks} programs went to the meta walk"
