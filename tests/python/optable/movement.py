"""Differential rows for the data-movement ops (src/ir/ops/movement.cpp, movement_combine.cpp):
views and reshapes, cat/stack, pad, repeat/tile, flip/roll, triu/tril, masked_fill.

Pure data movement is exact, so rows run over float, low-precision, integer and bool dtypes."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from optable.spec import Arg, OpCase

# Data movement copies values unchanged: every dtype family, bool included.
MOVE = ("f32", "bf16", "f16", "i64", "i32", "bool")
MOVE_NUM = ("f32", "bf16", "i64", "i32")  # where bool is not meaningful (pad value, fills)
INT64_MAX = 2**63 - 1
aten = torch.ops.aten


def case(op, ref, args, attrs=None, name="", dtypes=MOVE, **kw):
    return OpCase(op, ref, args, attrs or {}, dtypes=dtypes, name=name, **kw)


CASES: list[OpCase] = [
    # ---- reshape / view family ----
    case("reshape", lambda x: x.reshape(3, -1), [Arg((4, 6))], {"shape": [3, -1]}),
    case("reshape", lambda x: x.reshape(1, 1), [Arg(())], {"shape": [1, 1]}, name="0d"),
    case("reshape", lambda x: x.reshape(3, 0, 2), [Arg((0, 6))], {"shape": [3, 0, 2]}, name="empty"),
    case("reshape", lambda x: x.reshape(-1), [Arg((7, 127))], {"shape": [-1]}, name="odd"),
    case("reshape", lambda x: x.reshape(1, 7, 1), [Arg((7,))], {"shape": [1, 7, 1]}, name="size1"),
    # view: shapes that stay viewable on the harness's non-contiguous layouts (split dims only)
    case("view", lambda x: x.view(4, 2, 3), [Arg((4, 6))], {"shape": [4, 2, 3]}),
    case("view", lambda x: x.view(3, -1), [Arg((12,))], {"shape": [3, -1]}, name="1d"),
    case("view", lambda x: x.view(()), [Arg((1,))], {"shape": []}, name="to0d"),
    case("flatten", lambda x: torch.flatten(x, 1), [Arg((2, 3, 5))], {"start_dim": 1}),
    case("flatten", lambda x: torch.flatten(x, -3, -2), [Arg((2, 3, 5))],
         {"start_dim": -3, "end_dim": -2}, name="neg"),
    case("flatten", torch.flatten, [Arg(())], name="0d"),
    case("unflatten", lambda x: x.unflatten(-1, (2, -1)), [Arg((3, 6))], {"dim": -1, "sizes": [2, -1]}),
    # ---- permutations ----
    case("permute", lambda x: x.permute(2, 0, 1), [Arg((2, 3, 5))], {"dims": [2, 0, 1]}),
    case("permute", lambda x: x.permute(-1, 0), [Arg((7, 1))], {"dims": [-1, 0]}, name="neg"),
    case("permute", lambda x: x.permute(()), [Arg(())], {"dims": []}, name="0d"),
    case("transpose", lambda x: x.transpose(0, 1), [Arg((3, 7))], {"dim0": 0, "dim1": 1}),
    case("transpose", lambda x: x.transpose(-1, 0), [Arg((2, 3, 5))], {"dim0": -1, "dim1": 0}, name="neg"),
    case("t", torch.t, [Arg((3, 7))]),
    case("t", torch.t, [Arg((5,))], name="1d"),
    case("movedim", lambda x: torch.movedim(x, (0, 1), (2, 0)), [Arg((2, 3, 5))],
         {"source": [0, 1], "destination": [2, 0]}),
    # ---- expand / squeeze ----
    case("expand", lambda x: x.expand(2, -1, 4), [Arg((3, 1))], {"shape": [2, -1, 4]}),
    case("expand", lambda x: x.expand(3, 2), [Arg(())], {"shape": [3, 2]}, name="0d"),
    case("expand", lambda x: x.expand(0, 7), [Arg((1, 7))], {"shape": [0, 7]}, name="empty"),
    case("expand_as", lambda x, y: x.expand_as(y), [Arg((3, 1)), Arg((2, 3, 5))]),
    case("squeeze", torch.squeeze, [Arg((1, 3, 1))]),
    case("squeeze", lambda x: torch.squeeze(x, (0, -1)), [Arg((1, 3, 1))], {"dim": [0, -1]}, name="dims"),
    case("squeeze", lambda x: torch.squeeze(x, 1), [Arg((1, 3, 1))], {"dim": [1]}, name="non1"),
    case("unsqueeze", lambda x: x.unsqueeze(-1), [Arg((3, 4))], {"dim": -1}),
    case("unsqueeze", lambda x: x.unsqueeze(1), [Arg((3, 4))], {"dim": 1}, name="mid"),
    case("unsqueeze", lambda x: x.unsqueeze(0), [Arg(())], {"dim": 0}, name="0d"),
    # ---- slicing ----
    case("slice", lambda x: x[:, 1::2], [Arg((5, 7))], {"dim": 1, "start": 1, "end": INT64_MAX, "step": 2}),
    case("slice", lambda x: x[-3:-1], [Arg((5, 7))], {"dim": 0, "start": -3, "end": -1}, name="neg"),
    case("slice", lambda x: x[:, -100:100:3], [Arg((5, 127))], {"dim": -1, "start": -100, "end": 100, "step": 3},
         name="clamp"),
    case("slice", lambda x: x[5:2], [Arg((7,))], {"start": 5, "end": 2}, name="empty"),
    case("select", lambda x: x[:, -1], [Arg((5, 7))], {"dim": 1, "index": -1}),
    case("select", lambda x: x[2], [Arg((3,))], {"dim": 0, "index": 2}, name="to0d"),
    case("narrow", lambda x: x.narrow(0, 2, 3), [Arg((7, 5))], {"dim": 0, "start": 2, "length": 3}),
    case("narrow", lambda x: x.narrow(-1, -3, 2), [Arg((7, 5))], {"dim": -1, "start": -3, "length": 2}, name="neg"),
    # ---- splitting (multi-result) ----
    case("split", lambda x: torch.split(x, 3), [Arg((7, 4))], {"split_size": 3}),
    case("split", lambda x: torch.split(x, 2, -1), [Arg((3, 5))], {"split_size": 2, "dim": -1}, name="neg"),
    case("split_with_sizes", lambda x: torch.split(x, [2, 0, 5]), [Arg((7, 4))], {"split_sizes": [2, 0, 5]}),
    case("chunk", lambda x: torch.chunk(x, 3), [Arg((7, 3))], {"chunks": 3}),
    case("chunk", lambda x: torch.chunk(x, 4, 1), [Arg((2, 5))], {"chunks": 4, "dim": 1}, name="uneven"),
    case("unbind", lambda x: torch.unbind(x, 1), [Arg((3, 4))], {"dim": 1}),
    case("diagonal", lambda x: torch.diagonal(x, 1), [Arg((4, 5))], {"offset": 1}),
    case("diagonal", lambda x: torch.diagonal(x, -1, 2, 0), [Arg((3, 4, 5))],
         {"offset": -1, "dim1": 2, "dim2": 0}, name="dims"),
    case("contiguous", lambda x: x.contiguous(), [Arg((4, 3))]),
    case("clone", torch.clone, [Arg((4, 3))]),
    case("clone", torch.clone, [Arg(())], name="0d"),
    case("alias", aten.alias, [Arg((4, 3))]),
    # ---- cat / stack ----
    case("cat", lambda a, b: torch.cat([a, b]), [Arg((2, 3)), Arg((4, 3))]),
    case("cat", lambda a, b, c: torch.cat([a, b, c], -1), [Arg((2, 3)), Arg((2, 1)), Arg((2, 0))],
         {"dim": -1}, name="neg"),
    case("cat", lambda a, b: torch.cat([a, b], 1), [Arg((2, 3)), Arg((2, 2), dtype="i32")], {"dim": 1},
         name="promote"),
    case("cat", lambda a, b: torch.cat([a, b]), [Arg((0,)), Arg((2, 3))], name="legacy_empty"),
    case("stack", lambda a, b, c: torch.stack([a, b, c], 1), [Arg((3, 4)), Arg((3, 4)), Arg((3, 4))], {"dim": 1}),
    case("stack", lambda a, b: torch.stack([a, b], -1), [Arg(()), Arg(())], {"dim": -1}, name="0d"),
    # ---- pad ----
    case("pad", lambda x: F.pad(x, [1, 2], value=1.5), [Arg((2, 3, 5))], {"pad": [1, 2], "value": 1.5},
         dtypes=MOVE_NUM),
    case("pad", lambda x: F.pad(x, [1, 1, 2, 0]), [Arg((2, 3, 5))], {"pad": [1, 1, 2, 0]}, name="2d"),
    case("pad", lambda x: F.pad(x, [-1, 2]), [Arg((3, 7))], {"pad": [-1, 2]}, name="crop"),
    # EfficientNet's ZeroPad2d before a strided conv: asymmetric, every dim of an NCHW tensor.
    case("pad", lambda x: F.pad(x, [0, 1, 0, 1, 1, 0, 0, 2], value=-0.5), [Arg((1, 3, 4, 5))],
         {"pad": [0, 1, 0, 1, 1, 0, 0, 2], "value": -0.5}, name="4d", dtypes=MOVE_NUM),
    case("pad", lambda x: F.pad(x, [2, 3], mode="reflect"), [Arg((2, 3, 7))], {"pad": [2, 3], "mode": "reflect"},
         name="reflect", dtypes=MOVE_NUM),
    case("pad", lambda x: F.pad(x, [1, 2, 2, 1], mode="replicate"), [Arg((2, 3, 5))],
         {"pad": [1, 2, 2, 1], "mode": "replicate"}, name="replicate", dtypes=MOVE_NUM),
    case("pad", lambda x: F.pad(x, [2, 1], mode="circular"), [Arg((2, 3, 5))], {"pad": [2, 1], "mode": "circular"},
         name="circular"),
    # ---- repeat / flip / roll / triangles ----
    case("repeat", lambda x: x.repeat(2, 1, 3), [Arg((2, 3))], {"repeats": [2, 1, 3]}),
    case("repeat", lambda x: x.repeat(3), [Arg(())], {"repeats": [3]}, name="0d"),
    case("tile", lambda x: torch.tile(x, (2,)), [Arg((2, 3))], {"dims": [2]}),
    case("flip", lambda x: torch.flip(x, (0, -1)), [Arg((3, 4, 5))], {"dims": [0, -1]}),
    case("flip", lambda x: torch.flip(x, (0,)), [Arg((127,))], {"dims": [0]}, name="odd"),
    case("roll", lambda x: torch.roll(x, 2), [Arg((4, 5))], {"shifts": [2]}),
    case("roll", lambda x: torch.roll(x, (1, -2), (0, 1)), [Arg((4, 5))], {"shifts": [1, -2], "dims": [0, 1]},
         name="dims"),
    # Swin's cyclic shift (NHWC, two spatial dims); a shift past the size, a dim named twice, zero.
    case("roll", lambda x: torch.roll(x, (-2, -2), (1, 2)), [Arg((1, 5, 6, 3))],
         {"shifts": [-2, -2], "dims": [1, 2]}, name="swin", dtypes=MOVE_NUM),
    case("roll", lambda x: torch.roll(x, (7, 1, 0, 2), (0, 0, 1, -1)), [Arg((3, 4, 5))],
         {"shifts": [7, 1, 0, 2], "dims": [0, 0, 1, -1]}, name="wrap"),
    case("triu", lambda x: torch.triu(x, 1), [Arg((5, 7))], {"diagonal": 1}),
    case("triu", torch.triu, [Arg((0, 3))], name="empty"),
    case("tril", lambda x: torch.tril(x, -1), [Arg((3, 4, 5))], {"diagonal": -1}),
    case("tril", torch.tril, [Arg((7, 7))], name="square"),
    # ---- masked_fill ----
    case("masked_fill", lambda x, m: x.masked_fill(m, 2.5), [Arg((3, 4)), Arg((3, 4), dtype="bool", kind="bool")],
         {"value": 2.5}, dtypes=MOVE_NUM),
    case("masked_fill", lambda x, m, v: torch.masked_fill(x, m, v), [Arg((3, 4)), Arg((4,), dtype="bool"),
         Arg(scalar=-1)], name="operand"),
    case("masked_fill", lambda x, m: torch.masked_fill(x, m, True), [Arg((5,)), Arg((2, 1), dtype="bool")],
         {"value": True}, name="broadcast"),
    case("masked_fill", lambda x, m, v: x.masked_fill(m, v), [Arg((2, 3)), Arg((2, 3), dtype="bool"), Arg(())],
         name="tensor_value"),
]
