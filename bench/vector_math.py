"""Vector math kernels, eager vs xjit (and torch.compile with --inductor), side by side in one
process, 1 thread, median of interleaved repeats of the calling thread's CPU time (fair on a
loaded machine: everything runs on it).

--set trig (default): sin, cos, pow and atan2 on 512x512 f32 and a rotary-embedding expression.
--set activations: GELU (tanh and erf forms) and their gradients, SiLU, exp, tanh, sigmoid and
softmax on the GPT MLP's [8,128,1024] f32 and a small [16,1024]. The gradients are the
expressions xjit's autodiff emits (passes/autodiff.cpp, geluDerivative) times g; eager runs
PyTorch's own kernel for them, aten.gelu_backward.

    XJIT_NUM_THREADS=1 python bench/vector_math.py [--set trig|activations] [--repeats 15]
        [--inner 20] [--inductor]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ.setdefault("XJIT_NUM_THREADS", "1")

import torch
import torch.nn.functional as F

from bench.common import print_kernel_cases


def rotary(x: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """LLaMA / GPT-NeoX style: x * cos(pos * inv_freq) + rotate_half(x) * sin(pos * inv_freq)."""
    pos = torch.arange(x.shape[-2], dtype=torch.float32)
    freqs = pos[:, None] * inv_freq[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    x1, x2 = x.chunk(2, dim=-1)
    return x * emb.cos() + torch.cat([-x2, x1], dim=-1) * emb.sin()


def cases() -> dict[str, tuple]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(512, 512, generator=g) * 4
    xp = torch.rand(512, 512, generator=g) * 4
    heads = torch.randn(1, 8, 512, 64, generator=g)  # [batch, heads, seq, head_dim]
    inv_freq = 1.0 / (10000 ** (torch.arange(0, 64, 2, dtype=torch.float32) / 64))
    return {
        "sin": (lambda a: torch.sin(a), (x,)),
        "cos": (lambda a: torch.cos(a), (x,)),
        "pow 2.5": (lambda a: a**2.5, (xp,)),
        "atan2": (lambda a: torch.atan2(a, a + 1), (x,)),
        "rotary [1,8,512,64]": (rotary, (heads, inv_freq)),
    }


def gelu_tanh_grad(g: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """g times d/dx gelu(x, approximate="tanh"), as autodiff.cpp's geluDerivative writes it:
    s + x s (1 - s) 2u' with s = sigmoid(2u), s and s (1 - s) from exp(-2|u|)."""
    k, c = math.sqrt(2 / math.pi), 0.044715
    x2 = x * x
    u = x * (x2 * c + 1) * k
    e = torch.exp(u.abs() * -2)
    r = torch.reciprocal(e + 1)
    er = e * r
    s = torch.where(u >= 0, r, er)
    return g * (s + x * (er * r) * ((x2 * (3 * c) + 1) * (2 * k)))


def gelu_erf_grad(g: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """g times d/dx gelu(x) (erf form), as autodiff.cpp's geluDerivative writes it."""
    cdf = (torch.erf(x * (1 / math.sqrt(2))) + 1) * 0.5
    pdf = torch.exp(x * x * -0.5) * (1 / math.sqrt(2 * math.pi))
    return g * (cdf + x * pdf)


def activation_cases() -> dict[str, tuple]:
    g = torch.Generator().manual_seed(0)
    out: dict[str, tuple] = {}
    for shape in ((8, 128, 1024), (16, 1024)):
        x = torch.randn(*shape, generator=g) * 2
        dy = torch.randn(*shape, generator=g)
        s = "x".join(map(str, shape))
        out |= {
            f"gelu tanh {s}": (lambda a: F.gelu(a, approximate="tanh"), (x,)),
            f"gelu erf {s}": (lambda a: F.gelu(a), (x,)),
            f"gelu tanh grad {s}": (
                gelu_tanh_grad,
                (dy, x),
                lambda d, a: torch.ops.aten.gelu_backward(d, a, approximate="tanh"),
            ),
            f"gelu erf grad {s}": (
                gelu_erf_grad,
                (dy, x),
                lambda d, a: torch.ops.aten.gelu_backward(d, a),
            ),
            f"silu {s}": (lambda a: F.silu(a), (x,)),
            f"exp {s}": (lambda a: torch.exp(a), (x,)),
            f"tanh {s}": (lambda a: torch.tanh(a), (x,)),
            f"sigmoid {s}": (lambda a: torch.sigmoid(a), (x,)),
            f"softmax {s}": (lambda a: torch.softmax(a, -1), (x,)),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--inner", type=int, default=20)
    ap.add_argument("--inductor", action="store_true")
    ap.add_argument("--set", choices=("trig", "activations"), default="trig")
    ap.add_argument("--cases", default="", help="comma-separated substrings of case names")
    args = ap.parse_args()
    torch.set_num_threads(1)
    backends = ["eager", "xjit"] + (["inductor"] if args.inductor else [])
    selected = cases() if args.set == "trig" else activation_cases()
    if args.cases:
        keys = args.cases.split(",")
        selected = {n: c for n, c in selected.items() if any(k in n for k in keys)}
    print_kernel_cases(selected, backends, args.repeats, args.inner)

if __name__ == "__main__":
    main()
