"""Model suite for the benchmarks and examples: inference, fp32, random weights, no downloads.

`CASES` maps a case name ("model/bN") to a `Case`; `Case.build()` returns an eval-mode model and
the inputs to call it with. Building is deterministic (seeded), so every process gets the same
weights and inputs.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

Inputs = tuple[torch.Tensor, ...]


class MLP(nn.Module):
    def __init__(self, sizes: tuple[int, ...] = (784, 2048, 2048, 2048, 10)) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(itertools.pairwise(sizes)):
            layers.append(nn.Linear(a, b))
            if i < len(sizes) - 2:
                layers.append(nn.ReLU())
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y: torch.Tensor = self.net(x)
        return y


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.down(x))


class ResNet18(nn.Module):
    """ResNet-18 (He et al. 2015): 4 stages of 2 basic blocks, 64..512 channels."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)
        )
        blocks: list[nn.Module] = []
        cin = 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            blocks += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        logits: torch.Tensor = self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))
        return logits


class SmallResNet(nn.Module):
    """A small ResNet for 32x32 images (CIFAR-sized, 0.31M parameters): a 3x3 stem with
    max pooling, three basic blocks (32, 64, 128 channels), global average pooling, a linear
    classifier. The training benchmark's conv net (conv, batch_norm, relu, pooling backward)."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 32, 3, 1, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2)
        )
        self.blocks = nn.Sequential(BasicBlock(32, 32, 1), BasicBlock(32, 64, 2), BasicBlock(64, 128, 2))
        self.fc = nn.Linear(128, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        logits: torch.Tensor = self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))
        return logits


class LSTMLM(nn.Module):
    """LSTM language model written as a Python loop over time steps (nn.LSTMCell per layer)."""

    def __init__(self, vocab: int = 10000, embed: int = 256, hidden: int = 512, layers: int = 2) -> None:
        super().__init__()
        self.hidden = hidden
        self.embed = nn.Embedding(vocab, embed)
        self.cells = nn.ModuleList(nn.LSTMCell(embed if i == 0 else hidden, hidden) for i in range(layers))
        self.head = nn.Linear(hidden, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        batch, steps = tokens.shape
        x = self.embed(tokens)
        state = [(x.new_zeros(batch, self.hidden), x.new_zeros(batch, self.hidden)) for _ in self.cells]
        outputs = []
        for t in range(steps):
            h = x[:, t]
            for i, cell in enumerate(self.cells):
                state[i] = cell(h, state[i])
                h = state[i][0]
            outputs.append(h)
        logits: torch.Tensor = self.head(torch.stack(outputs, dim=1))
        return logits


def _bert() -> nn.Module:
    from transformers import BertConfig, BertModel

    return BertModel(BertConfig())


def _gpt2() -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(use_cache=False))


def llama(use_cache: bool = False) -> nn.Module:
    """LLaMA-style decoder (RMSNorm, RoPE, SwiGLU), ~106M parameters with its LM head; the suite
    runs it without a KV cache, bench/generate.py with one."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=768,
        intermediate_size=2048,
        num_hidden_layers=8,
        num_attention_heads=12,
        num_key_value_heads=12,
        max_position_embeddings=512,
        use_cache=use_cache,
    )
    return LlamaForCausalLM(config)


def _vit() -> nn.Module:
    from transformers import ViTConfig, ViTModel

    config = ViTConfig(hidden_size=384, num_hidden_layers=12, num_attention_heads=6, intermediate_size=1536)
    return ViTModel(config, add_pooling_layer=False)


def _tokens(vocab: int, seq: int) -> Callable[[int], Inputs]:
    return lambda batch: (torch.randint(0, vocab, (batch, seq)),)


def _randn(*shape: int) -> Callable[[int], Inputs]:
    return lambda batch: (torch.randn(batch, *shape),)


@dataclass(frozen=True)
class Case:
    model: str
    batch: int
    make_model: Callable[[], nn.Module]
    make_inputs: Callable[[int], Inputs]

    @property
    def name(self) -> str:
        return f"{self.model}/b{self.batch}"

    def build(self) -> tuple[nn.Module, Inputs]:
        torch.manual_seed(0)
        model = self.make_model().eval()
        return model, self.make_inputs(self.batch)


_SUITE: list[tuple[str, tuple[int, ...], Callable[[], nn.Module], Callable[[int], Inputs]]] = [
    ("mlp", (1, 64), MLP, _randn(784)),
    ("resnet18", (1, 8), ResNet18, _randn(3, 224, 224)),
    ("bert", (1,), _bert, _tokens(30522, 128)),
    ("gpt2", (1,), _gpt2, _tokens(50257, 128)),
    ("llama", (1,), llama, _tokens(32000, 128)),
    ("lstm", (1,), LSTMLM, _tokens(10000, 64)),
    ("vit", (1,), _vit, _randn(3, 224, 224)),
]

CASES: dict[str, Case] = {
    f"{name}/b{batch}": Case(name, batch, make_model, make_inputs)
    for name, batches, make_model, make_inputs in _SUITE
    for batch in batches
}
MODELS: list[str] = [name for name, *_ in _SUITE]


# ---- training steps (forward + backward + optimizer step; bench/training.py) ----------------


class GPTBlock(nn.Module):
    """A GPT-style pre-norm block: causal attention over a fused qkv projection, GELU MLP."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.out(nn.functional.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class SmallGPT(nn.Module):
    """A small decoder-only transformer (about 3.4M parameters): token and position embeddings,
    `layers` GPT blocks, final layer norm, vocabulary head."""

    def __init__(self, vocab: int = 1024, d: int = 256, seq: int = 128, layers: int = 4) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList([GPTBlock(d, 4) for _ in range(layers)])
        self.lnf, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        logits: torch.Tensor = self.head(self.lnf(x))
        return logits


class BertClassifier(nn.Module):
    """Fine-tuning a BERT encoder (Hugging Face transformers, 4 layers, hidden 256, random
    weights) with a classification head, dropout on: what `examples/bert_finetune.py` runs."""

    def __init__(self, num_labels: int = 3) -> None:
        super().__init__()
        from transformers import BertConfig, BertForSequenceClassification

        config = BertConfig(num_hidden_layers=4, hidden_size=256, num_attention_heads=4,
                            intermediate_size=1024, num_labels=num_labels)
        self.bert = BertForSequenceClassification(config)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.bert(input_ids=ids).logits
        return logits


@dataclass(frozen=True)
class TrainingCase:
    """One training step: the (compiled) model's forward, the loss in eager PyTorch, backward,
    and the optimizer step, as a torch.compile(model) user writes it."""

    model: str
    batch: int
    make_model: Callable[[], nn.Module]
    make_batch: Callable[[int], tuple[torch.Tensor, torch.Tensor]]
    optimizer: str  # "sgd" or "adamw"

    @property
    def name(self) -> str:
        return f"train-{self.model}/b{self.batch}"

    def build(self) -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
        torch.manual_seed(0)
        return self.make_model().train(), self.make_batch(self.batch)

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        if self.optimizer == "sgd":
            return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        return torch.optim.AdamW(model.parameters(), lr=1e-3)

    @staticmethod
    def loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


TRAINING_CASES: dict[str, TrainingCase] = {
    c.name: c
    for c in (
        TrainingCase(
            "mlp", 64, MLP, lambda b: (torch.randn(b, 784), torch.randint(0, 10, (b,))), "sgd"
        ),
        TrainingCase(
            "cnn", 8, SmallResNet, lambda b: (torch.randn(b, 3, 32, 32), torch.randint(0, 10, (b,))), "sgd"
        ),
        TrainingCase(
            "gpt",
            8,
            SmallGPT,
            lambda b: (torch.randint(0, 1024, (b, 128)), torch.randint(0, 1024, (b, 128))),
            "adamw",
        ),
        TrainingCase(
            "bert",
            8,
            BertClassifier,
            lambda b: (torch.randint(0, 30522, (b, 128)), torch.randint(0, 3, (b,))),
            "adamw",
        ),
    )
}
