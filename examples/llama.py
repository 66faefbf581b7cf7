"""A LLaMA-style decoder (RMSNorm, rotary embeddings, SwiGLU) of about 106M parameters from
Hugging Face transformers (random weights, nothing downloaded), 128 tokens: eager PyTorch vs
xjit.

    python examples/llama.py          (or: python -m xjit examples/llama.py)
"""

import torch
from _compare import compare
from transformers import LlamaConfig, LlamaForCausalLM

config = LlamaConfig(
    vocab_size=32000,
    hidden_size=768,
    intermediate_size=2048,
    num_hidden_layers=8,
    num_attention_heads=12,
    max_position_embeddings=512,
    use_cache=False,
)
model = LlamaForCausalLM(config)
input_ids = torch.randint(0, config.vocab_size, (1, 128))
compare("LLaMA ~106M, seq 128", model, input_ids, calls=10)
