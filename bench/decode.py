"""Token-by-token decoding with a static KV cache: the step an LLM serving loop repeats.

A LLaMA-style model from its Hugging Face config (random weights) decodes one token per call
with transformers' StaticCache (max_cache_len slots preallocated; each step writes one row per
layer with index_copy_ and attends over the cache). Eager and each compiler decode the same
greedy sequence, each with its own cache, their steps interleaved in one process; the figure is
the median step time after a warm-up, with the largest difference of the logits against eager's.

    python bench/decode.py [--steps 48] [--cache-len 1024] [--threads 1] [--backends eager,xjit]

Add inductor to --backends for torch.compile (it compiles for a minute on 2 cores).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import make_backend  # noqa: E402 - after sys.path


def build(cache_len: int) -> tuple[Any, Any]:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=1000,
        hidden_size=256,
        intermediate_size=704,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=cache_len,
    )
    return LlamaForCausalLM(cfg).eval(), cfg


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--cache-len", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--backends", default="eager,xjit")
    args = ap.parse_args()
    from transformers import StaticCache

    torch.set_num_threads(args.threads)
    model, cfg = build(args.cache_len)
    names = args.backends.split(",")
    fns = {b: make_backend(b, model) for b in names}
    caches = {b: StaticCache(config=cfg, max_cache_len=args.cache_len) for b in names}
    tokens = {b: torch.tensor([[1]]) for b in names}
    times: dict[str, list[float]] = {b: [] for b in names}
    logits: dict[str, list[torch.Tensor]] = {b: [] for b in names}
    with torch.no_grad():
        for step in range(args.steps):
            position = torch.tensor([step])
            order = names if step % 2 == 0 else names[::-1]
            for b in order:
                start = time.perf_counter()
                out = fns[b](
                    input_ids=tokens[b],
                    past_key_values=caches[b],
                    cache_position=position,
                    use_cache=True,
                )
                times[b].append(time.perf_counter() - start)
                logits[b].append(out.logits[:, -1])
                tokens[b] = out.logits[:, -1].argmax(-1, keepdim=True)
    eager_ms = statistics.median(times["eager"][args.warmup :]) * 1e3
    print(
        f"decode step, LLaMA-style 4 layers x 256, static cache of {args.cache_len}, "
        f"{args.threads} thread(s), median of steps {args.warmup}-{args.steps - 1}:"
    )
    for b in names:
        ms = statistics.median(times[b][args.warmup :]) * 1e3
        err = max((x - y).abs().max().item() for x, y in zip(logits[b], logits["eager"]))
        print(
            f"  {b:8s} {ms:7.2f} ms  {eager_ms / ms:5.2f}x eager  first step {times[b][0]:.2f} s"
            f"  max abs error {err:.1e}"
        )


if __name__ == "__main__":
    main()
