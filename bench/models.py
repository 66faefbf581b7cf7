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


def _llama() -> nn.Module:
    """LLaMA-style decoder (RMSNorm, RoPE, SwiGLU), ~106M parameters with its LM head."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=768,
        intermediate_size=2048,
        num_hidden_layers=8,
        num_attention_heads=12,
        num_key_value_heads=12,
        max_position_embeddings=512,
        use_cache=False,
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
    ("llama", (1,), _llama, _tokens(32000, 128)),
    ("lstm", (1,), LSTMLM, _tokens(10000, 64)),
    ("vit", (1,), _vit, _randn(3, 224, 224)),
]

CASES: dict[str, Case] = {
    f"{name}/b{batch}": Case(name, batch, make_model, make_inputs)
    for name, batches, make_model, make_inputs in _SUITE
    for batch in batches
}
MODELS: list[str] = [name for name, *_ in _SUITE]
