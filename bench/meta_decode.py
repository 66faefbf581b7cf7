"""Token-by-token decoding in the style of Meta's LLaMA reference code: `forward(tokens,
start_pos: int)` writes each layer's KV cache buffer with slice assignment at
`[:bsz, start_pos:start_pos + seqlen]` and attends over `[:bsz, :start_pos + seqlen]`.

`start_pos` is a Python int that changes at every call. xjit makes it symbolic after its first
change (docs/frontend.md, "Symbolic int arguments"): one capture for the prompt, one symbolic
capture for every decoding step. Eager and xjit decode the same greedy sequence, each with its
own model copy (the caches are module buffers), their steps interleaved in one process; the
figure is the median step time after a warm-up.

    python bench/meta_decode.py [--steps 48] [--max-seq 512] [--dim 256] [--layers 4]

The model (rotary embeddings with real cos/sin tables instead of the reference's complex
numbers) is also used by tests/python/frontend/test_symbolic_ints.py at tiny sizes.
"""

from __future__ import annotations

import argparse
import copy
import math
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

F = nn.functional


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, dim: int, n_heads: int, max_batch: int, max_seq: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = dim // n_heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        shape = (max_batch, max_seq, n_heads, self.head_dim)
        self.register_buffer("cache_k", torch.zeros(shape), persistent=False)
        self.register_buffer("cache_v", torch.zeros(shape), persistent=False)

    def forward(
        self,
        x: torch.Tensor,
        start_pos: int,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor | None,
    ) -> torch.Tensor:
        bsz, seqlen, _ = x.shape
        xq = self.wq(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        xk = self.wk(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        xv = self.wv(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        xq, xk = rotate(xq, cos, sin), rotate(xk, cos, sin)
        self.cache_k[:bsz, start_pos : start_pos + seqlen] = xk
        self.cache_v[:bsz, start_pos : start_pos + seqlen] = xv
        keys = self.cache_k[:bsz, : start_pos + seqlen].transpose(1, 2)
        values = self.cache_v[:bsz, : start_pos + seqlen].transpose(1, 2)
        xq = xq.transpose(1, 2)
        scores = torch.matmul(xq, keys.transpose(2, 3)) / math.sqrt(self.head_dim)
        if mask is not None:
            scores = scores + mask
        scores = F.softmax(scores.float(), dim=-1).type_as(xq)
        out = torch.matmul(scores, values).transpose(1, 2).contiguous().view(bsz, seqlen, -1)
        return self.wo(out)


class Block(nn.Module):
    def __init__(self, dim: int, n_heads: int, max_batch: int, max_seq: int) -> None:
        super().__init__()
        self.attention = Attention(dim, n_heads, max_batch, max_seq)
        self.w1 = nn.Linear(dim, 4 * dim, bias=False)
        self.w2 = nn.Linear(4 * dim, dim, bias=False)
        self.w3 = nn.Linear(dim, 4 * dim, bias=False)
        self.attention_norm = RMSNorm(dim)
        self.ffn_norm = RMSNorm(dim)

    def forward(self, x, start_pos, cos, sin, mask):  # type: ignore[no-untyped-def]
        h = x + self.attention(self.attention_norm(x), start_pos, cos, sin, mask)
        y = self.ffn_norm(h)
        return h + self.w2(F.silu(self.w1(y)) * self.w3(y))


class Transformer(nn.Module):
    """Meta's LLaMA `Transformer` (llama/model.py) at configurable sizes."""

    def __init__(
        self,
        vocab: int = 1000,
        dim: int = 256,
        n_layers: int = 4,
        n_heads: int = 4,
        max_batch: int = 1,
        max_seq: int = 512,
    ) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(Block(dim, n_heads, max_batch, max_seq) for _ in range(n_layers))
        self.norm = RMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)
        head_dim = dim // n_heads
        inv = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
        angles = torch.outer(torch.arange(max_seq * 2).float(), inv)
        angles = torch.cat((angles, angles), dim=-1)[:, None, :]  # (positions, 1, head_dim)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, tokens: torch.Tensor, start_pos: int) -> torch.Tensor:
        _bsz, seqlen = tokens.shape
        h = self.tok_embeddings(tokens)
        cos = self.cos[start_pos : start_pos + seqlen]
        sin = self.sin[start_pos : start_pos + seqlen]
        mask = None
        if seqlen > 1:
            mask = torch.full((seqlen, seqlen), float("-inf"))
            mask = torch.triu(mask, diagonal=1)
            mask = torch.hstack([torch.zeros((seqlen, start_pos)), mask]).type_as(h)
        for layer in self.layers:
            h = layer(h, start_pos, cos, sin, mask)
        return self.output(self.norm(h)).float()


def decode(model: nn.Module, prompt: torch.Tensor, steps: int) -> list[torch.Tensor]:
    """Greedy decoding: the prompt at start_pos 0, then one token per call."""
    logits = [model(prompt, 0)]
    pos = prompt.shape[1]
    for _ in range(steps):
        token = logits[-1][:, -1].argmax(-1, keepdim=True)
        logits.append(model(token, pos))
        pos += 1
    return logits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=8)
    ap.add_argument("--max-seq", type=int, default=512)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--dynamic",
        choices=("auto", "false"),
        default="auto",
        help="false: xjit.jit(dynamic=False), ints specialized as before symbolic ints (each step "
        "recompiles until the recompile limit, then the frame runs in Python)",
    )
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import xjit
    from xjit import _frontend as fe

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    eager = Transformer(dim=args.dim, n_layers=args.layers, max_seq=args.max_seq).eval()
    compiled = xjit.jit(copy.deepcopy(eager), dynamic=None if args.dynamic == "auto" else False)
    prompt = torch.randint(0, 1000, (1, args.prompt))
    times: dict[str, list[float]] = {"eager": [], "xjit": []}
    worst = 0.0
    with torch.no_grad():
        t0 = time.perf_counter()
        want, got = eager(prompt, 0), compiled(prompt, 0)
        first = time.perf_counter() - t0
        token = want[:, -1].argmax(-1, keepdim=True)
        for step in range(args.warmup + args.steps):
            pos = args.prompt + step
            outs = {}
            for name, fn in (("eager", eager), ("xjit", compiled)):
                t = time.perf_counter()
                outs[name] = fn(token, pos)
                if step >= args.warmup:
                    times[name].append(time.perf_counter() - t)
            worst = max(worst, (outs["xjit"] - outs["eager"]).abs().max().item())
            token = outs["eager"][:, -1].argmax(-1, keepdim=True)
    c = fe.events()["counters"]
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    print(
        f"meta-style decode dim={args.dim} layers={args.layers} max_seq={args.max_seq} "
        f"threads={args.threads} dynamic={args.dynamic}, {args.steps} steps after {args.warmup} "
        "warm-up, "
        f"positions {args.prompt}..{args.prompt + args.warmup + args.steps - 1}"
    )
    print(f"  eager {med['eager']:.3f} ms/step, xjit {med['xjit']:.3f} ms/step: "
          f"eager/xjit {med['eager'] / med['xjit']:.2f}x")
    print(f"  compiles {c['compiles']}, frames in Python {c['frames_in_python']}, "
          f"max |logits - eager| {worst:.2e}, prompt call (both) {first:.2f} s")


if __name__ == "__main__":
    main()
