"""Op-table rows: batch_norm (eval and training), batch_norm_with_update (training with the
running-stat update returned as results), instance_norm, layer_norm, group_norm, rms_norm and
local_response_norm.

Operand order is the IR's: (input, weight, bias, running_mean, running_var); the references
reorder for F.batch_norm / F.instance_norm. Normalized outputs are O(1), so the harness
defaults hold in f32 except over long rows (127 features: LONG) where PyTorch's f32 mean and
variance differ from the double ones by ~1e-5; f16/bf16 inputs with f32 parameters are covered
by rows whose parameters have a fixed f32 dtype (PyTorch's CPU mixed-dtype rule). Integer
dtypes are not supported by PyTorch's normalizations."""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

from optable.linalg import LONG, LOW_LONG, LP, case
from optable.spec import Arg, OpCase

_F = ("f32", "f64")


def _bn(training: bool, momentum: float = 0.1, eps: float = 1e-5) -> Callable[..., torch.Tensor]:
    return lambda x, w=None, b=None, rm=None, rv=None: F.batch_norm(x, rm, rv, w, b, training, momentum, eps)


def _bn_update(momentum: float, eps: float) -> Callable[..., Any]:
    def ref(x, w, b, rm, rv):  # F.batch_norm writes the running stats in place
        out = F.batch_norm(x, rm, rv, w, b, True, momentum, eps)
        return out, rm, rv

    return ref


def _stats(c: int, dtype: str | None = None) -> list[Arg]:
    return [Arg((c,), dtype=dtype), Arg((c,), dtype=dtype, kind="positive")]


CASES: list[OpCase] = []
for low_params in (None, "f32"):  # the parameters in the case dtype, or f32 (mixed)
    sfx = "" if low_params is None else "_f32params"
    dts = _F if low_params is None else ()
    aff = [Arg((5,), dtype=low_params), Arg((5,), dtype=low_params)]
    CASES += case("batch_norm", _bn(False, eps=1e-3), [Arg((4, 5, 7))] + aff + _stats(5, low_params), {"eps": 1e-3},
                  name="eval" + sfx, dtypes=dts, low=LP)
    CASES += case("batch_norm", _bn(True), [Arg((6, 5, 3, 2))] + aff, {"training": True}, name="train" + sfx,
                  dtypes=dts, low=LP)
    CASES += case("batch_norm_with_update", _bn_update(0.3, 1e-4), [Arg((6, 5, 3))] + aff + _stats(5, low_params),
                  {"momentum": 0.3, "eps": 1e-4}, name=sfx.lstrip("_"), dtypes=dts, low=LP)
    CASES += case("layer_norm", lambda x, w, b: F.layer_norm(x, (7,), w, b), [Arg((3, 4, 7)), Arg((7,), dtype=low_params),
                  Arg((7,), dtype=low_params)], {"normalized_shape": [7]}, name="affine" + sfx, dtypes=dts, low=LP)
    CASES += case("group_norm", lambda x, w, b: F.group_norm(x, 3, w, b, 1e-4), [Arg((2, 6, 5)), Arg((6,), dtype=low_params),
                  Arg((6,), dtype=low_params)], {"num_groups": 3, "eps": 1e-4}, name="affine" + sfx, dtypes=dts, low=LP)

CASES += [
    *case("batch_norm", _bn(False), [Arg((1, 7)), Arg(), Arg(), *_stats(7)], name="eval_noaffine",
          dtypes=_F, low=LP),
    *case("batch_norm", _bn(True), [Arg((0, 3, 4)), Arg((3,)), Arg((3,))], {"training": True}, name="empty_batch"),
    # >= 6 samples per channel: with 2 the variance can be ~eps and the output ill-conditioned.
    *case("batch_norm", _bn(True), [Arg((6, 127))], {"training": True}, name="train_noaffine_127", dtypes=_F,
          tol=LONG, low=LP, low_tol=LOW_LONG),
    *case("batch_norm_with_update", _bn_update(0.1, 1e-5), [Arg((8, 3, 5)), Arg(), Arg(), *_stats(3)], name="noaffine",
          dtypes=_F, low=LP),
    *case("instance_norm", lambda x, w, b: F.instance_norm(x, weight=w, bias=b, eps=1e-3), [Arg((2, 3, 7)), Arg((3,)), Arg((3,))],
          {"eps": 1e-3}, dtypes=_F, low=LP),
    *case("instance_norm", lambda x: F.instance_norm(x), [Arg((1, 4, 3, 5))], name="2d", dtypes=_F, low=LP),
    *case("instance_norm", lambda x, w, b, rm, rv: F.instance_norm(x, rm, rv, w, b, use_input_stats=False),
          [Arg((2, 3, 4)), Arg((3,)), Arg((3,)), *_stats(3)], {"use_input_stats": False}, name="running", dtypes=_F, low=LP),
    *case("layer_norm", lambda x: F.layer_norm(x, (127,)), [Arg((2, 3, 127))], {"normalized_shape": [127]}, name="f127",
          tol=LONG, low=LP),
    *case("layer_norm", lambda x, w: F.layer_norm(x, (4, 5), w, eps=1e-2), [Arg((3, 4, 5)), Arg((4, 5))],
          {"normalized_shape": [4, 5], "eps": 1e-2}, name="2d_weight_only", dtypes=_F, low=LP),
    *case("layer_norm", lambda x: F.layer_norm(x, (3,)), [Arg((0, 3))], {"normalized_shape": [3]}, name="empty"),
    *case("group_norm", lambda x: F.group_norm(x, 2), [Arg((1, 4, 3, 5))], {"num_groups": 2}, name="2d", dtypes=_F, low=LP),
    *case("group_norm", lambda x: F.group_norm(x, 1), [Arg((3, 7))], {"num_groups": 1}, name="ln_like", low=LP),
    *case("group_norm", lambda x: F.group_norm(x, 2), [Arg((0, 4, 3))], {"num_groups": 2}, name="empty_batch"),
    *case("rms_norm", lambda x, w: F.rms_norm(x, (7,), w), [Arg((3, 5, 7)), Arg((7,))], {"normalized_shape": [7]},
          dtypes=_F, low=LP),
    *case("rms_norm", lambda x, w: F.rms_norm(x, (7,), w), [Arg((3, 7)), Arg((7,), dtype="f32")], {"normalized_shape": [7]},
          name="f32_weight", low=LP),
    *case("rms_norm", lambda x: F.rms_norm(x, (4, 127), eps=1e-3), [Arg((2, 4, 127))],
          {"normalized_shape": [4, 127], "eps": 1e-3}, name="eps_2d", tol=LONG, low=LP),
    *case("rms_norm", lambda x: F.rms_norm(x, (3,)), [Arg((2, 3), kind="uniform", low=-0.05, high=0.05)],
          {"normalized_shape": [3]}, name="tiny_eps_none", dtypes=_F, low=LP),
    *case("local_response_norm", lambda x: F.local_response_norm(x, 3), [Arg((2, 7, 5))], {"size": 3}, dtypes=_F, low=LP),
    *case("local_response_norm", lambda x: F.local_response_norm(x, 2, alpha=0.5, beta=0.6, k=2.0), [Arg((1, 4, 3, 3))],
          {"size": 2, "alpha": 0.5, "beta": 0.6, "k": 2.0}, name="even_2d", dtypes=_F),  # torch: no f16/bf16 here
    *case("local_response_norm", lambda x: F.local_response_norm(x, 4), [Arg((1, 3, 2, 2, 3))], {"size": 4}, name="3d"),
]
