"""sin, cos, pow and atan2 on 512x512 f32, and a rotary-embedding expression, eager vs xjit (and
torch.compile with --inductor), side by side in one process, 1 thread, median of interleaved
repeats of the calling thread's CPU time (fair on a loaded machine: everything runs on it).

    XJIT_NUM_THREADS=1 python bench/vector_math.py [--repeats 15] [--inner 20] [--inductor]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ.setdefault("XJIT_NUM_THREADS", "1")

import torch

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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--inner", type=int, default=20)
    ap.add_argument("--inductor", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    backends = ["eager", "xjit"] + (["inductor"] if args.inductor else [])
    print_kernel_cases(cases(), backends, args.repeats, args.inner)

if __name__ == "__main__":
    main()
