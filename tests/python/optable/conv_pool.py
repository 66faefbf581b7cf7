"""Op-table rows: convolutions (conv1d/2d/3d, conv_transpose1d/2d/3d, the weight gradients
conv1d/2d/3d_weight) and poolings (max, avg, adaptive avg/max; 1-3 d; with and without indices).

Tolerances: convolutions sum Cin/groups * prod(kernel) products; PyTorch sums f32 in f32 in its
own order, so rows with long sums (127 channels, 3-d kernels) use LONG (rtol/atol 1e-4), and
low-precision rows with long sums LOW_LONG. Integer convolutions are exact (they wrap alike).
Pooling is exact up to one rounding (max) or a short sum (avg): harness defaults."""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from optable.linalg import INTS, LONG, LOW_LONG, LP, case
from optable.spec import Arg, OpCase

# ---- convolution -------------------------------------------------------------------------------

# (name, input, weight, bias?, torch kwargs); IR attrs are the kwargs (padding strings become
# padding_mode).
_CONV: dict[int, list[tuple[str, tuple, tuple, bool, dict[str, Any]]]] = {
    1: [
        ("", (2, 7, 31), (5, 7, 3), True, dict(stride=2, padding=1)),
        ("groups_dil", (1, 4, 9), (6, 2, 3), True, dict(groups=2, dilation=2)),
        ("same_even", (2, 3, 10), (4, 3, 4), True, dict(padding="same", dilation=2)),
        ("valid", (2, 3, 10), (4, 3, 4), False, dict(padding="valid", stride=3)),
        ("unbatched", (3, 8), (2, 3, 2), False, dict()),
        ("ch127", (1, 127, 6), (7, 127, 2), True, dict()),
    ],
    2: [
        ("", (2, 3, 7, 9), (4, 3, 3, 2), True, dict(stride=[2, 1], padding=[1, 0], dilation=[1, 2])),
        ("batch1_odd", (1, 5, 11, 7), (7, 5, 3, 3), True, dict(padding=1)),
        ("depthwise", (2, 6, 7, 7), (6, 1, 3, 3), True, dict(groups=6, stride=2)),
        ("groups", (1, 6, 5, 6), (4, 3, 2, 3), False, dict(groups=2, padding=[0, 1])),
        ("same", (1, 2, 6, 5), (3, 2, 3, 2), True, dict(padding="same")),
        ("pointwise127", (1, 127, 4, 5), (7, 127, 1, 1), True, dict()),
        ("empty_batch", (0, 3, 5, 5), (2, 3, 3, 3), True, dict()),
        ("unbatched", (3, 6, 6), (2, 3, 3, 3), True, dict(stride=2)),
    ],
    3: [
        ("", (1, 2, 5, 6, 4), (3, 2, 2, 3, 1), True, dict(stride=[1, 2, 1], padding=[1, 0, 0])),
        ("groups_dil", (2, 4, 5, 5, 5), (4, 2, 3, 2, 2), False, dict(groups=2, dilation=[1, 2, 2], padding=1)),
    ],
}

_CONV_T: dict[int, list[tuple[str, tuple, tuple, bool, dict[str, Any]]]] = {
    1: [
        ("", (2, 4, 7), (4, 3, 3), True, dict(stride=2, padding=1, output_padding=1)),
        ("groups_dil", (1, 4, 5), (4, 2, 2), False, dict(groups=2, dilation=3, output_padding=2, stride=3)),
    ],
    2: [
        ("", (1, 4, 5, 6), (4, 3, 3, 2), True, dict(stride=2, padding=1, output_padding=1)),
        ("groups_dil", (2, 4, 3, 4), (4, 2, 2, 3), True, dict(groups=2, dilation=[2, 1], stride=[1, 2], padding=[0, 1])),
        ("batch1_odd", (1, 7, 5, 5), (7, 5, 3, 3), False, dict()),
        ("unbatched", (3, 4, 4), (3, 2, 2, 2), True, dict(stride=2)),
    ],
    3: [
        ("", (1, 2, 3, 4, 3), (2, 3, 2, 2, 3), True, dict(stride=[2, 1, 2], padding=[0, 1, 1])),
    ],
}


def _ir_attrs(kw: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in kw.items():
        if k == "padding" and isinstance(v, str):
            out["padding_mode"] = v
        elif k == "groups" or isinstance(v, list):
            out[k] = v
        else:
            out[k] = [v]
    return out


def _conv_cases(op: str, table: dict, transposed: bool) -> list[OpCase]:
    out: list[OpCase] = []
    for nd, entries in table.items():
        fn = getattr(F, f"{op}{nd}d")
        for name, x, w, bias, kw in entries:
            args = [Arg(x), Arg(w)] + ([Arg((w[1] * kw.get("groups", 1) if transposed else w[0],))] if bias else [])
            ref = (lambda fn, kw: lambda x, w, b=None: fn(x, w, b, **kw))(fn, kw)
            groups = kw.get("groups", 1)
            long = (w[0] // groups if transposed else w[1]) * math.prod(w[2:]) >= 64
            # torch's CPU integer convolutions are int64 only (int32 works on a few paths).
            ints = ("i64",)
            out += case(f"{op}{nd}d", ref, args, _ir_attrs(kw), name=name, tol=LONG if long else None,
                        low=LP, low_tol=LOW_LONG if long else None, ints=ints)
    return out


# conv{nd}d_weight: (name, input, weight, torch kwargs); grad_output has the convolution's output
# shape. The reference is torch.nn.grad.conv{nd}d_weight.
_CONV_W: dict[int, list[tuple[str, tuple, tuple, dict[str, Any]]]] = {
    1: [
        ("", (2, 4, 9), (6, 4, 3), dict(stride=2, padding=1)),
        ("groups_dil", (2, 4, 9), (6, 2, 3), dict(groups=2, dilation=2)),
    ],
    2: [
        ("", (2, 3, 7, 9), (4, 3, 3, 2), dict(stride=[2, 1], padding=[1, 0], dilation=[1, 2])),
        ("depthwise", (2, 6, 7, 7), (6, 1, 3, 3), dict(groups=6, stride=2)),
        ("floor_dropped", (1, 2, 8, 8), (3, 2, 3, 3), dict(stride=2)),
        ("pointwise", (2, 5, 4, 4), (7, 5, 1, 1), dict()),
    ],
    3: [
        ("", (1, 2, 5, 6, 4), (3, 2, 2, 3, 1), dict(stride=[1, 2, 1], padding=[1, 0, 0])),
    ],
}


def _conv_out(x: tuple, w: tuple, kw: dict[str, Any]) -> tuple:
    nd = len(x) - 2

    def at(key: str, d: int, default: int) -> int:
        v = kw.get(key, default)
        return v[d] if isinstance(v, list) else v

    spatial = tuple(
        (x[2 + d] + 2 * at("padding", d, 0) - at("dilation", d, 1) * (w[2 + d] - 1) - 1) // at("stride", d, 1) + 1
        for d in range(nd)
    )
    return (x[0], w[0]) + spatial


def _conv_weight_cases() -> list[OpCase]:
    import torch.nn.grad

    out: list[OpCase] = []
    for nd, entries in _CONV_W.items():
        fn = getattr(torch.nn.grad, f"conv{nd}d_weight")
        for name, x, w, kw in entries:
            ref = (lambda fn, w, kw: lambda x, gy: fn(x, w, gy, **kw))(fn, w, kw)
            out += case(f"conv{nd}d_weight", ref, [Arg(x), Arg(_conv_out(x, w, kw))],
                        {"weight_size": list(w), **_ir_attrs(kw)}, name=name, dtypes=("f32", "f64"), tol=LONG)
    return out


CASES: list[OpCase] = (
    _conv_cases("conv", _CONV, False) + _conv_cases("conv_transpose", _CONV_T, True) + _conv_weight_cases()
)

# ---- pooling -----------------------------------------------------------------------------------

# (name, input, kwargs) per rank; kwargs are torch's; IR attrs get lists.
_MAX: dict[int, list[tuple[str, tuple, dict[str, Any]]]] = {
    1: [
        ("", (2, 3, 11), dict(kernel_size=3, stride=2)),
        ("pad_dil_ceil", (1, 4, 10), dict(kernel_size=3, stride=2, padding=1, dilation=2, ceil_mode=True)),
        ("unbatched", (3, 7), dict(kernel_size=2)),
    ],
    2: [
        ("", (2, 3, 7, 9), dict(kernel_size=[3, 2], stride=[2, 1], padding=[1, 0])),
        ("ceil", (1, 2, 7, 7), dict(kernel_size=2, ceil_mode=True)),
        ("dil", (1, 3, 9, 8), dict(kernel_size=[2, 3], dilation=[2, 1], padding=[1, 1])),
        ("empty_batch", (0, 2, 4, 4), dict(kernel_size=2)),
        ("ch127", (1, 127, 3, 3), dict(kernel_size=2, stride=1)),
    ],
    3: [
        ("", (1, 2, 5, 6, 7), dict(kernel_size=[2, 3, 2], stride=[1, 2, 2], padding=[1, 1, 0])),
        ("ceil", (2, 1, 5, 5, 5), dict(kernel_size=2, ceil_mode=True)),
    ],
}

_AVG: dict[int, list[tuple[str, tuple, dict[str, Any]]]] = {
    1: [
        ("", (2, 3, 11), dict(kernel_size=3, stride=2, padding=1)),
        ("exclude_pad_ceil", (1, 4, 10), dict(kernel_size=4, stride=3, padding=2, ceil_mode=True, count_include_pad=False)),
    ],
    2: [
        ("", (2, 3, 7, 9), dict(kernel_size=[3, 2], stride=[2, 1], padding=[1, 0])),
        ("ceil_exclude", (1, 2, 5, 5), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)),
        ("ceil_include", (1, 2, 5, 5), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
        ("divisor", (1, 3, 6, 7), dict(kernel_size=2, divisor_override=3)),
        ("empty_batch", (0, 2, 4, 4), dict(kernel_size=2)),
    ],
    3: [
        ("", (1, 2, 5, 6, 7), dict(kernel_size=[2, 3, 2], stride=[1, 2, 2], padding=[1, 1, 0])),
        ("divisor", (1, 1, 4, 4, 4), dict(kernel_size=2, divisor_override=5, ceil_mode=True, stride=3)),
    ],
}

_ADAPTIVE: dict[int, list[tuple[str, tuple, Any]]] = {
    1: [("", (2, 3, 11), 4), ("up", (1, 2, 3), 5), ("unbatched", (3, 7), 3)],
    2: [("", (2, 3, 7, 9), [3, 4]), ("global", (1, 127, 5, 5), 1), ("keep", (1, 2, 5, 6), [None, 4])],
    3: [("", (1, 2, 5, 6, 7), [2, 3, 4])],
}


def _pool_attrs(kw: dict[str, Any]) -> dict[str, Any]:
    return {k: [v] if isinstance(v, int) and not isinstance(v, bool) and k != "divisor_override" else v for k, v in kw.items()}


def _pool_cases() -> list[OpCase]:
    out: list[OpCase] = []
    for nd in (1, 2, 3):
        mp = getattr(F, f"max_pool{nd}d")
        for name, x, kw in _MAX[nd]:
            # torch's max_pool1d has no integer kernel; 2-d and 3-d do.
            ints = INTS if nd > 1 else ()
            out += case(f"max_pool{nd}d", (lambda mp, kw: lambda x: mp(x, **kw))(mp, kw), [Arg(x)], _pool_attrs(kw),
                        name=name, low=LP, ints=ints)
            out += case(f"max_pool{nd}d_with_indices", (lambda mp, kw: lambda x: mp(x, return_indices=True, **kw))(mp, kw),
                        [Arg(x)], _pool_attrs(kw), name=name, low=LP, ints=ints)
        ap = getattr(F, f"avg_pool{nd}d")
        for name, x, kw in _AVG[nd]:
            # torch's avg_pool3d has no f16/bf16 CPU kernel.
            out += case(f"avg_pool{nd}d", (lambda ap, kw: lambda x: ap(x, **kw))(ap, kw), [Arg(x)], _pool_attrs(kw),
                        name=name, low=LP if nd < 3 else (), ints=("i64",))
        aa, am = getattr(F, f"adaptive_avg_pool{nd}d"), getattr(F, f"adaptive_max_pool{nd}d")
        for name, x, size in _ADAPTIVE[nd]:
            ir_size = [-1 if s is None else s for s in size] if isinstance(size, list) else [size]
            attrs = {"output_size": ir_size}
            out += case(f"adaptive_avg_pool{nd}d", (lambda aa, s: lambda x: aa(x, s))(aa, size), [Arg(x)], attrs,
                        name=name, low=LP)
            out += case(f"adaptive_max_pool{nd}d", (lambda am, s: lambda x: am(x, s))(am, size), [Arg(x)], attrs,
                        name=name, low=LP)
            out += case(f"adaptive_max_pool{nd}d_with_indices", (lambda am, s: lambda x: am(x, s, return_indices=True))(am, size),
                        [Arg(x)], attrs, name=name, low=LP)
    return out


CASES += _pool_cases()


# ---- linear resampling: upsample_{linear1d,bilinear2d,trilinear3d} and their gradients,
# against ATen's ops of those names (F.interpolate's linear modes call them). Attributes:
# spatial output_size / input_size, align_corners, per-dim scales ([] or <= 0: none).
_RESAMPLE = {
    1: ("upsample_linear1d", [
        ("up", (2, 3, 7), [16], False, []),
        ("scale", (2, 3, 11), [27], False, [2.5]),
        ("down_ac", (1, 2, 9), [4], True, []),
    ]),
    2: ("upsample_bilinear2d", [
        ("up", (2, 3, 5, 6), [11, 13], False, []),
        ("mixed_scale", (1, 2, 7, 9), [3, 24], False, [0.45, 2.7]),
        ("ac", (2, 2, 4, 5), [9, 3], True, []),
        ("one_row_ac", (1, 2, 7, 9), [1, 9], True, []),
    ]),
    3: ("upsample_trilinear3d", [
        ("up", (1, 2, 3, 4, 5), [4, 6, 7], False, [1.5, 1.5, 1.5]),
        ("ac", (1, 2, 3, 3, 4), [5, 2, 4], True, []),
    ]),
}


def _resample_cases() -> list[OpCase]:
    out: list[OpCase] = []
    for nd, (op, rows) in _RESAMPLE.items():
        fwd = getattr(torch.ops.aten, op)
        bwd = getattr(torch.ops.aten, op + "_backward")
        for name, x, size, ac, scales in rows:
            sc = [s if s > 0 else None for s in scales] or [None] * nd
            attrs = {"align_corners": ac, "scales": [float(s) for s in scales]}
            out += case(op, (lambda f, sz, ac, sc: lambda t: f(t, sz, ac, *sc))(fwd, size, ac, sc),
                        [Arg(x)], {"output_size": size, **attrs}, name=name, dtypes=("f32", "f64"))
            gy = (*x[:2], *size)
            out += case(op + "_backward",
                        (lambda f, sz, full, ac, sc: lambda g: f(g, sz, full, ac, *sc))(bwd, size, list(x), ac, sc),
                        [Arg(gy)], {"input_size": list(x[2:]), **attrs}, name=name, dtypes=("f32", "f64"))
    return out


CASES += _resample_cases()
