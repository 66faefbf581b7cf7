"""GPT-2 small with its LM head from Hugging Face transformers (random weights, nothing
downloaded), one sequence of 128 tokens: eager PyTorch vs xjit.

    python examples/gpt2.py          (or: python -m xjit examples/gpt2.py)
"""

import torch
from _compare import compare
from transformers import GPT2Config, GPT2LMHeadModel

config = GPT2Config(use_cache=False)  # gpt2's shape: 12 layers, hidden 768, 12 heads
model = GPT2LMHeadModel(config)
input_ids = torch.randint(0, config.vocab_size, (1, 128))
compare("GPT-2 small, seq 128", model, input_ids, calls=10)
