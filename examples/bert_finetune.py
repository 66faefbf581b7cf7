"""Fine-tuning a BERT classifier (Hugging Face transformers, built from its config with random
weights, nothing downloaded) with AdamW, dropout on: eager PyTorch vs xjit, step by step.

    python examples/bert_finetune.py          (or: python -m xjit examples/bert_finetune.py)
"""

import torch
from _compare import compare_training
from transformers import BertConfig, BertForSequenceClassification

torch.manual_seed(0)
config = BertConfig(num_hidden_layers=4, hidden_size=256, num_attention_heads=4,
                    intermediate_size=1024, num_labels=3)
model = BertForSequenceClassification(config)
batch = {
    "input_ids": torch.randint(0, config.vocab_size, (8, 128)),
    "attention_mask": torch.ones(8, 128, dtype=torch.long),
    "labels": torch.randint(0, 3, (8,)),
}
compare_training("BERT classifier fine-tuning, batch 8 x 128", model, batch,
                 lambda params: torch.optim.AdamW(params, lr=2e-5))
