"""Dynamic sequence length: one symbolic capture of a Hugging Face model against one static
capture per length.

BERT-base, GPT-2 small or the bench LLaMA (bench/models.py, random weights, batch 1) at sequence
lengths 32, 64 and 128, side by side in one process: eager, xjit with `dynamic=False` (one
compile per length) and xjit with `dynamic=True` (one compile for every length: the length is a
shape symbol, and the sizes taken from it - BERT's position-id slice and token-type expand, the
arange of positions - are symbolic attributes evaluated per call, docs/ir.md). Prints the median
time per call at each length (samples interleaved round-robin), compile counts and the time of
the first calls.

    python bench/dynamic_seq.py [--model bert|gpt2|llama] [--repeats 5] [--inner 3]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import setup_threads  # noqa: E402
from bench.dynamic_shapes import compare  # noqa: E402
from bench.models import _bert, _gpt2, llama  # noqa: E402

LENGTHS = (32, 64, 128)
MODELS = {"bert": _bert, "gpt2": _gpt2, "llama": llama}


def first(out: object) -> torch.Tensor:
    """The model's main output: BERT's last hidden state, a language model's logits."""
    t = getattr(out, "last_hidden_state", None)
    return t if t is not None else getattr(out, "logits")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted(MODELS), default="bert")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--inner", type=int, default=3)
    a = p.parse_args()
    setup_threads()
    torch.manual_seed(0)
    model = MODELS[a.model]().eval()
    inputs = {n: torch.randint(1, 1000, (1, n)) for n in LENGTHS}
    compare(model, inputs, "length", a.repeats, a.inner, main_output=first)


if __name__ == "__main__":
    main()
