"""BERT-base encoder from Hugging Face transformers (random weights, nothing downloaded),
one sequence of 128 tokens: eager PyTorch vs xjit.

    python examples/bert_inference.py          (or: python -m xjit examples/bert_inference.py)
"""

import torch
from _compare import compare
from transformers import BertConfig, BertModel

config = BertConfig()  # bert-base-uncased's shape: 12 layers, hidden 768, 12 heads
model = BertModel(config)
input_ids = torch.randint(0, config.vocab_size, (1, 128))
compare("BERT-base, seq 128", model, input_ids)
