"""Models beyond the benchmark suite: does xjit work on *their* model?

Builds small models from Hugging Face transformers config classes (random weights, nothing
downloaded) plus a few models written here (CNNs, a GRU/LSTM model, a UNet block), and runs
each under xjit.jit: inference, fp32, batch 1, sequence 64. For each: graphs, graph breaks with their reasons, PyTorch fallback
nodes, warnings, error vs eager over 3 calls, and the steady speedup vs eager (median of
interleaved calls; indicative only on a shared machine).

Each model runs in its own subprocess, so a crash in one does not hide the others.

    python bench/zoo.py                      # every model, table to stdout and bench/results/zoo.md
    python bench/zoo.py --models t5,bart     # a subset
    python bench/zoo.py --no-write           # do not touch bench/results/zoo.md
    python bench/zoo.py --train --threads 1  # training steps (bench/zoo_train.py), to
                                             # bench/results/zoo_train.md and .json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # bench.common, when run as a script


@dataclass(frozen=True)
class Size:
    """What every builder scales: the benchmark's models (BENCH) and the regression tests' tiny
    ones (TINY, tests/python/frontend/test_zoo_models.py) come from the same code."""

    hidden: int  # text models' width; the vision transformers' is 3/4 of it
    layers: int  # encoder-decoder models get half in each
    heads: int
    ffn: int  # LLaMA-style gated MLPs get 11/16 of it
    vocab: int
    seq: int  # tokens; sliding/local attention windows are half of it
    image: int  # square images
    mel_bins: int  # Whisper's input features


BENCH = Size(hidden=256, layers=4, heads=4, ffn=1024, vocab=1000, seq=64, image=128, mel_bins=80)
TINY = Size(hidden=32, layers=1, heads=4, ffn=64, vocab=100, seq=12, image=32, mel_bins=16)
SEQ = BENCH.seq


def _tokens(s: Size, seq: int | None = None) -> Any:
    import torch

    return torch.randint(0, s.vocab, (1, seq or s.seq))


def _pixels(s: Size) -> Any:
    import torch

    return torch.randn(1, 3, s.image, s.image)


def _gated_ffn(s: Size) -> int:
    return s.ffn * 11 // 16  # LLaMA-style SwiGLU width for the same parameter count


# Each builder returns (model, kwargs to call it with).
Built = tuple[Any, dict[str, Any]]


def _encoder(s: Size) -> dict[str, Any]:
    """The config fields that BERT-style encoder configs name alike."""
    return dict(
        vocab_size=s.vocab,
        hidden_size=s.hidden,
        num_hidden_layers=s.layers,
        num_attention_heads=s.heads,
        intermediate_size=s.ffn,
    )


def _distilbert(s: Size) -> Built:
    from transformers import DistilBertConfig, DistilBertModel

    c = DistilBertConfig(vocab_size=s.vocab, dim=s.hidden, n_layers=s.layers, n_heads=s.heads, hidden_dim=s.ffn)
    return DistilBertModel(c), {"input_ids": _tokens(s)}


def _roberta(s: Size) -> Built:
    from transformers import RobertaConfig, RobertaModel

    c = RobertaConfig(**_encoder(s))
    return RobertaModel(c), {"input_ids": _tokens(s)}


def _albert(s: Size) -> Built:
    from transformers import AlbertConfig, AlbertModel

    c = AlbertConfig(**_encoder(s), embedding_size=s.hidden // 2)
    return AlbertModel(c), {"input_ids": _tokens(s)}


def _electra(s: Size) -> Built:
    from transformers import ElectraConfig, ElectraModel

    c = ElectraConfig(**_encoder(s), embedding_size=s.hidden // 2)
    return ElectraModel(c), {"input_ids": _tokens(s)}


def _t5_config(s: Size) -> Any:
    from transformers import T5Config

    half = max(1, s.layers // 2)
    return T5Config(
        vocab_size=s.vocab,
        d_model=s.hidden,
        d_kv=s.hidden // s.heads,
        d_ff=s.ffn,
        num_layers=half,
        num_decoder_layers=half,
        num_heads=s.heads,
    )


def _t5_encoder(s: Size) -> Built:
    from transformers import T5EncoderModel

    return T5EncoderModel(_t5_config(s)), {"input_ids": _tokens(s)}


def _t5(s: Size) -> Built:
    from transformers import T5Model

    c = _t5_config(s)
    c.use_cache = False
    return T5Model(c), {"input_ids": _tokens(s), "decoder_input_ids": _tokens(s, seq=s.seq // 4)}


def _bart_like(s: Size) -> dict[str, Any]:
    """The config fields that BART-style encoder-decoder configs (BART, Pegasus) name alike:
    half the layers in each side."""
    half = max(1, s.layers // 2)
    return dict(
        vocab_size=s.vocab,
        d_model=s.hidden,
        encoder_layers=half,
        decoder_layers=half,
        encoder_attention_heads=s.heads,
        decoder_attention_heads=s.heads,
        encoder_ffn_dim=s.ffn,
        decoder_ffn_dim=s.ffn,
        max_position_embeddings=2 * s.seq,
        use_cache=False,
    )


def _bart(s: Size) -> Built:
    from transformers import BartConfig, BartModel

    return BartModel(BartConfig(**_bart_like(s))), {"input_ids": _tokens(s)}


def _opt(s: Size) -> Built:
    from transformers import OPTConfig, OPTForCausalLM

    c = OPTConfig(
        vocab_size=s.vocab,
        hidden_size=s.hidden,
        num_hidden_layers=s.layers,
        num_attention_heads=s.heads,
        ffn_dim=s.ffn,
        word_embed_proj_dim=s.hidden,
        max_position_embeddings=2 * s.seq,
        use_cache=False,
    )
    return OPTForCausalLM(c), {"input_ids": _tokens(s)}


def _gpt_neo(s: Size) -> Built:
    from transformers import GPTNeoConfig, GPTNeoForCausalLM

    pairs = max(1, s.layers // 2)  # a global and a local layer each
    c = GPTNeoConfig(
        vocab_size=s.vocab,
        hidden_size=s.hidden,
        num_layers=2 * pairs,
        num_heads=s.heads,
        attention_types=[[["global", "local"], pairs]],
        window_size=s.seq // 2,  # shorter than the sequence: the local layer's mask matters
        max_position_embeddings=2 * s.seq,
        bos_token_id=0,
        eos_token_id=0,
        use_cache=False,
    )
    return GPTNeoForCausalLM(c), {"input_ids": _tokens(s)}


def _decoder(s: Size, ffn: int) -> dict[str, Any]:
    """The config fields that LLaMA-style decoder configs name alike."""
    return {**_encoder(s), "intermediate_size": ffn, "max_position_embeddings": 2 * s.seq, "use_cache": False}


def _mistral(s: Size) -> Built:
    from transformers import MistralConfig, MistralForCausalLM

    c = MistralConfig(**_decoder(s, _gated_ffn(s)), num_key_value_heads=s.heads // 2, sliding_window=s.seq // 2)
    return MistralForCausalLM(c), {"input_ids": _tokens(s)}


def _qwen2(s: Size) -> Built:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    c = Qwen2Config(**_decoder(s, _gated_ffn(s)), num_key_value_heads=s.heads // 2)
    return Qwen2ForCausalLM(c), {"input_ids": _tokens(s)}


def _phi(s: Size) -> Built:
    from transformers import PhiConfig, PhiForCausalLM

    c = PhiConfig(**_decoder(s, s.ffn), partial_rotary_factor=0.5)
    return PhiForCausalLM(c), {"input_ids": _tokens(s)}


def _whisper_encoder(s: Size) -> Built:
    import torch
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    half = max(1, s.layers // 2)
    c = WhisperConfig(
        vocab_size=s.vocab,
        d_model=s.hidden,
        encoder_layers=half,
        encoder_attention_heads=s.heads,
        encoder_ffn_dim=s.ffn,
        num_mel_bins=s.mel_bins,
        max_source_positions=s.seq,
        pad_token_id=0,
        bos_token_id=0,
        eos_token_id=0,
        decoder_start_token_id=0,
    )
    # The encoder's two convs halve the frames: 2 * seq mel frames -> seq positions.
    return WhisperEncoder(c), {"input_features": torch.randn(1, s.mel_bins, 2 * s.seq)}


def _vit_width(s: Size) -> int:
    return s.hidden * 3 // 4  # 3 heads of 64 at the bench's size, as DeiT-tiny


def _deit(s: Size) -> Built:
    from transformers import DeiTConfig, DeiTModel

    c = DeiTConfig(
        hidden_size=_vit_width(s),
        num_hidden_layers=s.layers,
        num_attention_heads=3,
        intermediate_size=4 * _vit_width(s),
        image_size=s.image,
    )
    return DeiTModel(c, add_pooling_layer=False), {"pixel_values": _pixels(s)}


def _swin(s: Size) -> Built:
    from transformers import SwinConfig, SwinModel

    # Patches of 4 and a window of 4: two stages need an image of at least 32.
    c = SwinConfig(
        image_size=s.image, embed_dim=_vit_width(s) // 4, depths=[2, 2], num_heads=[3, 6], window_size=4
    )
    return SwinModel(c), {"pixel_values": _pixels(s)}


def _convnext_hf(s: Size) -> Built:
    from transformers import ConvNextConfig, ConvNextModel

    c = ConvNextConfig(hidden_sizes=[48, 96, 192, 384], depths=[1, 1, 2, 1], image_size=s.image)
    return ConvNextModel(c), {"pixel_values": _pixels(s)}


def _mobilenet(s: Size) -> Built:
    """MobileNetV2-style CNN written here: inverted residuals with depthwise 3x3 convs, ReLU6."""
    import torch
    from torch import nn

    def block(cin: int, cout: int, stride: int, expand: int) -> nn.Module:
        mid = cin * expand
        return nn.Sequential(
            nn.Conv2d(cin, mid, 1, bias=False),
            nn.BatchNorm2d(mid),
            nn.ReLU6(),
            nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False),
            nn.BatchNorm2d(mid),
            nn.ReLU6(),
            nn.Conv2d(mid, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
        )

    class InvertedResidual(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int, expand: int = 4) -> None:
            super().__init__()
            self.body = block(cin, cout, stride, expand)
            self.residual = stride == 1 and cin == cout

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.body(x)
            return x + y if self.residual else y

    class MobileNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU6())
            layers = []
            cin = 16
            for cout, stride in ((24, 2), (24, 1), (32, 2), (32, 1), (64, 2), (64, 1)):
                layers.append(InvertedResidual(cin, cout, stride))
                cin = cout
            self.blocks = nn.Sequential(*layers)
            self.head = nn.Linear(cin, 100)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.blocks(self.stem(x))
            return self.head(x.mean(dim=(2, 3)))

    return MobileNet(), {"x": _pixels(s)}


def _convnext_code(s: Size) -> Built:
    """ConvNeXt-style CNN written here: depthwise 7x7 conv, channels-last LayerNorm via permute,
    GELU MLP, layer scale."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, dim: int) -> None:
            super().__init__()
            self.dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
            self.norm = nn.LayerNorm(dim, eps=1e-6)
            self.fc1 = nn.Linear(dim, 4 * dim)
            self.fc2 = nn.Linear(4 * dim, dim)
            self.gamma = nn.Parameter(torch.full((dim,), 0.5))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.dw(x).permute(0, 2, 3, 1)
            y = self.fc2(nn.functional.gelu(self.fc1(self.norm(y))))
            return x + (self.gamma * y).permute(0, 3, 1, 2)

    class ConvNeXt(nn.Module):
        def __init__(self, dims: tuple[int, ...] = (32, 64, 128)) -> None:
            super().__init__()
            self.stem = nn.Conv2d(3, dims[0], 4, 4)
            stages: list[nn.Module] = []
            for i, d in enumerate(dims):
                if i:
                    stages.append(nn.Conv2d(dims[i - 1], d, 2, 2))
                stages += [Block(d), Block(d)]
            self.stages = nn.Sequential(*stages)
            self.head = nn.Linear(dims[-1], 100)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.stages(self.stem(x))
            return self.head(x.mean(dim=(-2, -1)))

    return ConvNeXt(), {"x": _pixels(s)}


def _deberta_v2(s: Size) -> Built:
    from transformers import DebertaV2Config, DebertaV2Model

    c = DebertaV2Config(
        **_encoder(s),
        max_position_embeddings=2 * s.seq,
        relative_attention=True,
        position_buckets=s.seq // 2,
        pos_att_type=["p2c", "c2p"],
    )
    return DebertaV2Model(c), {"input_ids": _tokens(s)}


def _mobilebert(s: Size) -> Built:
    from transformers import MobileBertConfig, MobileBertModel

    c = MobileBertConfig(vocab_size=s.vocab, num_hidden_layers=s.layers)
    return MobileBertModel(c), {"input_ids": _tokens(s)}


def _bloom(s: Size) -> Built:
    from transformers import BloomConfig, BloomForCausalLM

    c = BloomConfig(vocab_size=s.vocab, hidden_size=s.hidden, n_layer=s.layers, n_head=s.heads, use_cache=False)
    return BloomForCausalLM(c), {"input_ids": _tokens(s)}


def _falcon(s: Size) -> Built:
    from transformers import FalconConfig, FalconForCausalLM

    # Falcon's default is multi-query attention: one key/value head (the repeat_kv reshape that
    # plan-memory once took for a copy).
    c = FalconConfig(
        vocab_size=s.vocab,
        hidden_size=s.hidden,
        num_hidden_layers=s.layers,
        num_attention_heads=s.heads,
        use_cache=False,
    )
    return FalconForCausalLM(c), {"input_ids": _tokens(s)}


def _gptj(s: Size) -> Built:
    from transformers import GPTJConfig, GPTJForCausalLM

    c = GPTJConfig(
        vocab_size=s.vocab,
        n_embd=s.hidden,
        n_layer=s.layers,
        n_head=s.heads,
        rotary_dim=s.hidden // s.heads // 2,
        n_positions=2 * s.seq,
        use_cache=False,
    )
    c.bos_token_id = c.eos_token_id = 0
    return GPTJForCausalLM(c), {"input_ids": _tokens(s)}


def _gemma(s: Size) -> Built:
    from transformers import GemmaConfig, GemmaForCausalLM

    # One key/value head: the repeat_kv reshape behind a wrong result (plan-memory).
    c = GemmaConfig(**_decoder(s, _gated_ffn(s)), num_key_value_heads=1, head_dim=s.hidden // s.heads)
    return GemmaForCausalLM(c), {"input_ids": _tokens(s)}


def _clip_vision(s: Size) -> Built:
    from transformers import CLIPVisionConfig, CLIPVisionModel

    c = CLIPVisionConfig(
        hidden_size=_vit_width(s),
        intermediate_size=4 * _vit_width(s),
        num_hidden_layers=s.layers,
        num_attention_heads=3,
        image_size=s.image,
    )
    return CLIPVisionModel(c), {"pixel_values": _pixels(s)}


def _speech_encoder(s: Size) -> dict[str, Any]:
    """The config fields that wav2vec2-style speech encoders (wav2vec2, Hubert) name alike."""
    return dict(
        hidden_size=s.hidden,
        num_hidden_layers=max(1, s.layers // 2),
        num_attention_heads=s.heads,
        intermediate_size=s.ffn,
        conv_dim=(s.hidden // 2,) * 3,
        conv_stride=(5, 4, 4),
        conv_kernel=(10, 4, 4),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4,
    )


def _samples(s: Size) -> Any:
    """Audio for a speech encoder: its three convs take 80 samples to a frame, so 80 * seq
    samples make seq - 1 frames."""
    import torch

    return torch.randn(1, 80 * s.seq)


def _wav2vec2(s: Size) -> Built:
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    return Wav2Vec2Model(Wav2Vec2Config(**_speech_encoder(s))), {"input_values": _samples(s)}


def _efficientnet(s: Size) -> Built:
    from transformers import EfficientNetConfig, EfficientNetModel

    c = EfficientNetConfig(image_size=s.image, width_coefficient=0.5, depth_coefficient=0.5, hidden_dim=640)
    return EfficientNetModel(c), {"pixel_values": _pixels(s)}


def _resnet_hf(s: Size) -> Built:
    from transformers import ResNetConfig, ResNetModel

    c = ResNetConfig(embedding_size=32, hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 1, 1], layer_type="bottleneck")
    return ResNetModel(c), {"pixel_values": _pixels(s)}


def _mixtral(s: Size) -> Built:
    from transformers import MixtralConfig, MixtralForCausalLM

    # Top-2 of 4 experts: the router's topk and the experts' data-dependent dispatch.
    c = MixtralConfig(
        **_decoder(s, _gated_ffn(s) // 16 * 8), num_key_value_heads=s.heads // 2, num_local_experts=4, num_experts_per_tok=2
    )
    return MixtralForCausalLM(c), {"input_ids": _tokens(s)}


def _qwen2_moe(s: Size) -> Built:
    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM

    # Top-2 of 4 experts plus a sigmoid-gated shared expert.
    c = Qwen2MoeConfig(
        **_decoder(s, _gated_ffn(s)),
        num_key_value_heads=s.heads // 2,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=_gated_ffn(s) // 16 * 8,  # grouped_mm: rows of 16-byte multiples
        shared_expert_intermediate_size=_gated_ffn(s) // 16 * 8,
    )
    return Qwen2MoeForCausalLM(c), {"input_ids": _tokens(s)}


def _gpt2_cache(s: Size) -> Built:
    from transformers import GPT2Config, GPT2LMHeadModel

    # use_cache=True: the output carries the key/value cache (a DynamicCache object).
    c = GPT2Config(
        vocab_size=s.vocab, n_embd=s.hidden, n_layer=s.layers, n_head=s.heads, n_positions=2 * s.seq, use_cache=True
    )
    return GPT2LMHeadModel(c), {"input_ids": _tokens(s)}


def _mamba(s: Size) -> Built:
    from transformers import MambaConfig, MambaForCausalLM

    # Without the CUDA kernels, the selective scan is a Python loop over the sequence (unrolled:
    # one graph). use_associative_scan (the config's default) takes torch's associative_scan
    # instead whenever a compiler traces the model, which xjit cannot capture (graph breaks in
    # torch.utils._pytree; docs/perf.md "Session 17").
    c = MambaConfig(
        vocab_size=s.vocab,
        hidden_size=s.hidden,
        num_hidden_layers=s.layers,
        state_size=8,
        use_cache=False,
        use_associative_scan=False,
    )
    return MambaForCausalLM(c), {"input_ids": _tokens(s)}


def _segformer(s: Size) -> Built:
    from transformers import SegformerConfig, SegformerForSemanticSegmentation

    # Overlapping patch-embedding convs, attention with spatially reduced keys (a strided conv),
    # a depthwise conv in the MLP, and the decode head's bilinear upsampling and concatenation.
    c = SegformerConfig(
        hidden_sizes=[16, 32, 64, 128], num_attention_heads=[1, 2, 2, 4], depths=[1, 1, 1, 1], decoder_hidden_size=64
    )
    return SegformerForSemanticSegmentation(c), {"pixel_values": _pixels(s)}


def _mobilevit(s: Size) -> Built:
    from transformers import MobileViTConfig, MobileViTModel

    # Inverted-residual convs, then transformers over unfolded patches (reshapes, interpolate).
    c = MobileViTConfig(
        image_size=s.image, hidden_sizes=[48, 64, 80], neck_hidden_sizes=[8, 8, 16, 16, 32, 32, 96], num_attention_heads=2
    )
    return MobileViTModel(c), {"pixel_values": _pixels(s)}


def _rnn_code(s: Size) -> Built:
    """A GRU and a bidirectional two-layer LSTM (nn modules, batch_first) over embeddings, then a
    classifier on the last step."""
    import torch
    from torch import nn

    class Recurrent(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(s.vocab, s.hidden)
            self.gru = nn.GRU(s.hidden, s.hidden, batch_first=True)
            self.lstm = nn.LSTM(s.hidden, s.hidden // 2, num_layers=2, batch_first=True, bidirectional=True)
            self.head = nn.Linear(s.hidden, 10)

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            x, _ = self.gru(self.embed(input_ids))
            y, (h, _) = self.lstm(x)
            return self.head(y[:, -1] + h[-2:].transpose(0, 1).flatten(1))

    return Recurrent(), {"input_ids": _tokens(s)}


def _unet_code(s: Size) -> Built:
    """A UNet-style diffusion block written here: convs, GroupNorm, SiLU, a timestep embedding,
    self-attention over the pixels at the bottom, nearest upsampling and skip concatenation."""
    import math

    import torch
    from torch import nn

    class ResBlock(nn.Module):
        def __init__(self, cin: int, cout: int, temb: int) -> None:
            super().__init__()
            self.norm1 = nn.GroupNorm(8, cin)
            self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
            self.time = nn.Linear(temb, cout)
            self.norm2 = nn.GroupNorm(8, cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
            self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

        def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            h = self.conv1(nn.functional.silu(self.norm1(x)))
            h = h + self.time(nn.functional.silu(t))[:, :, None, None]
            h = self.conv2(nn.functional.silu(self.norm2(h)))
            return self.skip(x) + h

    class Attention(nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.norm = nn.GroupNorm(8, c)
            self.attn = nn.MultiheadAttention(c, 4, batch_first=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, c, h, w = x.shape
            y = self.norm(x).flatten(2).transpose(1, 2)
            y, _ = self.attn(y, y, y, need_weights=False)
            return x + y.transpose(1, 2).reshape(b, c, h, w)

    class UNet(nn.Module):
        def __init__(self, ch: tuple[int, ...] = (32, 64, 64)) -> None:
            super().__init__()
            temb = 4 * ch[0]
            self.ch0 = ch[0]
            self.time_mlp = nn.Sequential(nn.Linear(ch[0], temb), nn.SiLU(), nn.Linear(temb, temb))
            self.stem = nn.Conv2d(3, ch[0], 3, padding=1)
            self.down = nn.ModuleList(ResBlock(a, b, temb) for a, b in zip(ch, ch[1:]))
            self.pool = nn.ModuleList(nn.Conv2d(b, b, 3, 2, 1) for b in ch[1:])
            self.mid = ResBlock(ch[-1], ch[-1], temb)
            self.attn = Attention(ch[-1])
            self.up = nn.ModuleList(ResBlock(2 * b, a, temb) for a, b in reversed(list(zip(ch, ch[1:]))))
            self.out = nn.Sequential(nn.GroupNorm(8, ch[0]), nn.SiLU(), nn.Conv2d(ch[0], 3, 3, padding=1))

        def embed_time(self, t: torch.Tensor) -> torch.Tensor:
            half = self.ch0 // 2
            dtype = self.stem.weight.dtype  # float64 in the training check's reference copy
            freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=dtype) / half)
            args = t[:, None].to(dtype) * freqs[None]
            return self.time_mlp(torch.cat([torch.sin(args), torch.cos(args)], dim=-1))

        def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            temb = self.embed_time(t)
            h = self.stem(x)
            skips = []
            for block, pool in zip(self.down, self.pool):
                h = block(h, temb)
                skips.append(h)
                h = pool(h)
            h = self.attn(self.mid(h, temb))
            for block in self.up:
                h = nn.functional.interpolate(h, scale_factor=2.0, mode="nearest")
                h = block(torch.cat([h, skips.pop()], dim=1), temb)
            return self.out(h)

    return UNet(), {"x": _pixels(s), "t": torch.tensor([37])}


def _token_ids(i: int) -> dict[str, int]:
    """Special token ids inside a small vocabulary (some configs default to ids past it)."""
    return {"bos_token_id": i, "eos_token_id": i, "pad_token_id": i}


def _llama(s: Size) -> Built:
    from transformers import LlamaConfig, LlamaForCausalLM

    # Grouped-query attention (2 query heads per key/value head) and Llama 3's rope scaling
    # (frequencies rescaled by wavelength at init: the "llama3" rope type).
    c = LlamaConfig(
        **_decoder(s, _gated_ffn(s)),
        num_key_value_heads=s.heads // 2,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": s.seq,
        },
    )
    return LlamaForCausalLM(c), {"input_ids": _tokens(s)}


def _qwen3(s: Size) -> Built:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    # RMSNorm on each head's queries and keys before the rotary embedding.
    c = Qwen3Config(**_decoder(s, _gated_ffn(s)), num_key_value_heads=s.heads // 2, head_dim=s.hidden // s.heads)
    return Qwen3ForCausalLM(c), {"input_ids": _tokens(s)}


def _phi3(s: Size) -> Built:
    from transformers import Phi3Config, Phi3ForCausalLM

    # Fused qkv and gate_up projections, split by slicing; partial rotary.
    c = Phi3Config(
        **_decoder(s, _gated_ffn(s)), **_token_ids(0), num_key_value_heads=s.heads // 2, partial_rotary_factor=0.5
    )
    return Phi3ForCausalLM(c), {"input_ids": _tokens(s)}


def _gpt_neox(s: Size) -> Built:
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    # Pythia-style: a quarter of each head rotary, parallel attention and MLP residuals.
    c = GPTNeoXConfig(**_decoder(s, s.ffn), rotary_pct=0.25, use_parallel_residual=True)
    return GPTNeoXForCausalLM(c), {"input_ids": _tokens(s)}


def _stablelm(s: Size) -> Built:
    from transformers import StableLmConfig, StableLmForCausalLM

    # Per-head LayerNorm on queries and keys (one LayerNorm module per head), partial rotary.
    c = StableLmConfig(
        **_decoder(s, _gated_ffn(s)), num_key_value_heads=s.heads // 2, qk_layernorm=True, partial_rotary_factor=0.25
    )
    return StableLmForCausalLM(c), {"input_ids": _tokens(s)}


def _olmo2(s: Size) -> Built:
    from transformers import Olmo2Config, Olmo2ForCausalLM

    # RMSNorm over all heads' queries and keys, norms after attention and MLP.
    c = Olmo2Config(**_decoder(s, _gated_ffn(s)), **_token_ids(0), num_key_value_heads=s.heads // 2)
    return Olmo2ForCausalLM(c), {"input_ids": _tokens(s)}


def _cohere(s: Size) -> Built:
    from transformers import CohereConfig, CohereForCausalLM

    # Bias-free LayerNorm in float32, parallel attention and MLP, interleaved rotary
    # (repeat_interleave of cos/sin), tied embeddings with a logit scale.
    c = CohereConfig(**_decoder(s, _gated_ffn(s)), **_token_ids(0), num_key_value_heads=s.heads // 2)
    return CohereForCausalLM(c), {"input_ids": _tokens(s)}


def _gpt_bigcode(s: Size) -> Built:
    from transformers import GPTBigCodeConfig, GPTBigCodeForCausalLM

    # StarCoder-style multi-query attention: one key/value head, fused into c_attn.
    c = GPTBigCodeConfig(
        vocab_size=s.vocab,
        n_embd=s.hidden,
        n_layer=s.layers,
        n_head=s.heads,
        n_inner=s.ffn,
        n_positions=2 * s.seq,
        multi_query=True,
        use_cache=False,
        **_token_ids(0),
    )
    return GPTBigCodeForCausalLM(c), {"input_ids": _tokens(s)}


def _mpnet(s: Size) -> Built:
    from transformers import MPNetConfig, MPNetModel

    # T5-style relative position buckets (log-spaced) as an attention bias shared by the layers.
    c = MPNetConfig(**_encoder(s), max_position_embeddings=2 * s.seq + 2, relative_attention_num_buckets=32)
    return MPNetModel(c), {"input_ids": _tokens(s)}


def _pegasus(s: Size) -> Built:
    from transformers import PegasusConfig, PegasusModel

    # Encoder-decoder with sinusoidal positions and pre-layer norms.
    return PegasusModel(PegasusConfig(**_bart_like(s))), {"input_ids": _tokens(s), "decoder_input_ids": _tokens(s, seq=s.seq // 4)}


def _dinov2(s: Size) -> Built:
    from transformers import Dinov2Config, Dinov2Model

    # Position embeddings interpolated (bicubic) to the image, layer scale.
    c = Dinov2Config(
        hidden_size=_vit_width(s),
        num_hidden_layers=s.layers,
        num_attention_heads=3,
        mlp_ratio=4,
        image_size=2 * s.image,  # trained at another size: the interpolation runs
        patch_size=16 if s.image >= 64 else 8,
    )
    return Dinov2Model(c), {"pixel_values": _pixels(s)}


def _beit(s: Size) -> Built:
    from transformers import BeitConfig, BeitModel

    # A learned relative position bias per layer (a table indexed by a buffer), layer scale,
    # mean pooling.
    c = BeitConfig(
        hidden_size=_vit_width(s),
        num_hidden_layers=s.layers,
        num_attention_heads=3,
        intermediate_size=4 * _vit_width(s),
        image_size=s.image,
        patch_size=16 if s.image >= 64 else 8,
        use_relative_position_bias=True,
        use_mean_pooling=True,
    )
    return BeitModel(c), {"pixel_values": _pixels(s)}


def _hubert(s: Size) -> Built:
    from transformers import HubertConfig, HubertModel

    # LayerNorm after each conv (wav2vec2 here takes group norm), pre-norm transformer layers.
    c = HubertConfig(**_speech_encoder(s), feat_extract_norm="layer", do_stable_layer_norm=True)
    return HubertModel(c), {"input_values": _samples(s)}


def _poolformer(s: Size) -> Built:
    from transformers import PoolFormerConfig, PoolFormerModel

    # Token mixing by 3x3 average pooling (count_include_pad=False), GroupNorm(1), layer scale.
    w = s.hidden // 8
    c = PoolFormerConfig(image_size=s.image, hidden_sizes=[2 * w, 4 * w, 6 * w, 8 * w], depths=[1, 1, 2, 1])
    return PoolFormerModel(c), {"pixel_values": _pixels(s)}


def _levit(s: Size) -> Built:
    from transformers import LevitConfig, LevitModel

    # Conv stem, attention with a learned bias indexed by offsets, subsampling attention, hardswish.
    c = LevitConfig(image_size=s.image, hidden_sizes=[64, 128, 192], num_attention_heads=[2, 4, 6], depths=[1, 1, 1])
    return LevitModel(c), {"pixel_values": _pixels(s)}


def _rwkv(s: Size) -> Built:
    from transformers import RwkvConfig, RwkvForCausalLM

    # Without its CUDA kernel, the WKV recurrence is a Python loop over the sequence.
    c = RwkvConfig(
        vocab_size=s.vocab,
        hidden_size=s.hidden,
        num_hidden_layers=max(2, s.layers),  # its init divides by layers - 1
        attention_hidden_size=s.hidden,
        intermediate_size=s.ffn,
        context_length=2 * s.seq,
        use_cache=False,
    )
    return RwkvForCausalLM(c), {"input_ids": _tokens(s)}


def _funnel(s: Size) -> Built:
    from transformers import FunnelConfig, FunnelBaseModel

    c = FunnelConfig(
        vocab_size=s.vocab,
        block_sizes=[1, 1, 1],
        d_model=s.hidden,
        n_head=s.heads,
        d_head=s.hidden // s.heads,
        d_inner=s.ffn,
    )
    return FunnelBaseModel(c), {"input_ids": _tokens(s)}


MODELS: dict[str, Callable[[Size], Built]] = {
    "distilbert": _distilbert,
    "roberta": _roberta,
    "albert": _albert,
    "electra": _electra,
    "t5-encoder": _t5_encoder,
    "t5": _t5,
    "bart": _bart,
    "opt": _opt,
    "gpt-neo": _gpt_neo,
    "mistral": _mistral,
    "qwen2": _qwen2,
    "phi": _phi,
    "whisper-encoder": _whisper_encoder,
    "deit": _deit,
    "swin": _swin,
    "convnext-hf": _convnext_hf,
    "mobilenet": _mobilenet,
    "convnext": _convnext_code,
    "deberta-v2": _deberta_v2,
    "mobilebert": _mobilebert,
    "bloom": _bloom,
    "falcon": _falcon,
    "gpt-j": _gptj,
    "gemma": _gemma,
    "clip-vision": _clip_vision,
    "wav2vec2": _wav2vec2,
    "efficientnet": _efficientnet,
    "resnet-hf": _resnet_hf,
    "mixtral": _mixtral,
    "qwen2-moe": _qwen2_moe,
    "gpt2-cache": _gpt2_cache,
    "mamba": _mamba,
    "segformer": _segformer,
    "mobilevit": _mobilevit,
    "rnn": _rnn_code,
    "unet": _unet_code,
    "llama": _llama,
    "qwen3": _qwen3,
    "phi3": _phi3,
    "gpt-neox": _gpt_neox,
    "stablelm": _stablelm,
    "olmo2": _olmo2,
    "cohere": _cohere,
    "gpt-bigcode": _gpt_bigcode,
    "mpnet": _mpnet,
    "pegasus": _pegasus,
    "dinov2": _dinov2,
    "beit": _beit,
    "hubert": _hubert,
    "poolformer": _poolformer,
    "levit": _levit,
    "rwkv": _rwkv,
    "funnel": _funnel,
}


def _randomize_norm_stats(model: Any) -> None:
    """Batch norms with random affine parameters and running statistics: HF inits some to
    zero (EfficientNet's last one gave an all-zero output, which compares equal to anything)."""
    import torch

    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            with torch.no_grad():
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)


def build(name: str, size: Size = BENCH, seed: int = 0) -> Built:
    import torch

    torch.manual_seed(seed)
    model, kwargs = MODELS[name](size)
    _randomize_norm_stats(model)
    return model.eval(), kwargs


def run_one(name: str, rounds: int) -> dict[str, Any]:
    """Measure one model in this process; the result as a JSON-able dict."""
    import torch

    import xjit  # from PYTHONPATH (a build dir's python/) or the installed package

    from bench.common import leaves, max_errors

    result: dict[str, Any] = {"model": name}
    model, kwargs = build(name)
    result["params_m"] = round(sum(p.numel() for p in model.parameters()) / 1e6, 2)
    with torch.no_grad():
        ref = model(**kwargs)
        compiled = xjit.jit(model)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t0 = time.perf_counter()
            report = xjit.explain(compiled)(**kwargs)
            result["first_call_s"] = time.perf_counter() - t0
            outs = [report.output] + [compiled(**kwargs) for _ in range(2)]
        result["warnings"] = sorted({f"{w.category.__name__}: {str(w.message)[:300]}" for w in caught})
        errs = [max_errors(o, ref) for o in outs]
        result["zero_output"] = all(not t.any() for t in leaves(ref))  # compares equal to anything
        result["max_abs_err"] = max(e["max_abs_err"] for e in errs)
        result["max_rel_err"] = max(e["max_rel_err"] for e in errs)
        result["graphs"] = report.graph_count
        result["breaks"] = [f"{b.where}: {b.reason}" for b in report.graph_breaks]
        result["ops"] = report.op_count
        result["fallback_nodes"] = sum(g.ops.get("external_call", 0) for g in report.graphs)
        result["fallback_targets"] = fallback_targets(report)
        result["in_python"] = [g.note for g in report.graphs if g.runs_in_python]
        times: dict[str, list[float]] = {"eager": [], "xjit": []}
        fns = {"eager": lambda: model(**kwargs), "xjit": lambda: compiled(**kwargs)}
        t0 = time.perf_counter()
        fns["eager"]()
        inner = max(1, min(20, int(0.05 / max(time.perf_counter() - t0, 1e-6))))  # ~50 ms samples
        result["calls_per_sample"] = inner
        for r in range(rounds):
            order = ["eager", "xjit"] if r % 2 == 0 else ["xjit", "eager"]
            for b in order:
                t0 = time.perf_counter()
                for _ in range(inner):
                    fns[b]()
                times[b].append((time.perf_counter() - t0) / inner)
        result["eager_ms"] = statistics.median(times["eager"]) * 1e3
        result["xjit_ms"] = statistics.median(times["xjit"]) * 1e3
        result["speedup"] = result["eager_ms"] / result["xjit_ms"]
    return result


def fallback_targets(report: Any) -> dict[str, int]:
    """PyTorch fallback nodes of an explain report's graphs, counted by target name."""
    targets: dict[str, int] = {}
    for g in report.graphs:
        for line in g.ir.splitlines():
            if "external_call(" in line and 'name = "' in line:
                target = line.split('name = "', 1)[1].split('"', 1)[0]
                targets[target] = targets.get(target, 0) + 1
    return targets


def run_isolated(
    name: str, rounds: int, timeout: float, threads: int | None, extra: list[str] | None = None
) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--one", name, "--rounds", str(rounds), *(extra or [])]
    env = dict(os.environ)
    if threads:  # eager's and xjit's kernels alike
        env.update(OMP_NUM_THREADS=str(threads), XJIT_NUM_THREADS=str(threads))
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"model": name, "error": f"timed out after {timeout:.0f} s"}
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("ZOO-RESULT "):
            return json.loads(line[len("ZOO-RESULT ") :])
    tail = (p.stderr or p.stdout).strip().splitlines()[-6:]
    return {"model": name, "error": f"exit {p.returncode}: " + " | ".join(tail)[-600:]}


def _status(r: dict[str, Any]) -> str:
    if "error" in r:
        return "error"
    if r["max_rel_err"] > 1e-5:
        return "MISMATCH"
    if r.get("zero_output"):
        return "zero output"
    if r["graphs"] == 1 and not r["breaks"] and not r["fallback_nodes"] and not r["in_python"]:
        return "ok"
    return "runs"


def table(results: list[dict[str, Any]]) -> str:
    head = "| model | params (M) | status | graphs | breaks | fallback nodes | ops | max abs err | max rel err | eager ms | xjit ms | speedup |"
    lines = [head, "|" + "---|" * 12]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['model']} | | error | | | | | | | | | |")
            continue
        lines.append(
            f"| {r['model']} | {r['params_m']} | {_status(r)} | {r['graphs']} | {len(r['breaks'])} | "
            f"{r['fallback_nodes']} | {r['ops']} | {r['max_abs_err']:.1e} | {r['max_rel_err']:.1e} | "
            f"{r['eager_ms']:.2f} | {r['xjit_ms']:.2f} | {r['speedup']:.2f}x |"
        )
    return "\n".join(lines)


def details(
    results: list[dict[str, Any]],
    first: Callable[[dict[str, Any]], list[str]] = lambda r: [],
    expected_fallbacks: tuple[str, ...] = (),
) -> str:
    """Per model: `first(r)`'s notes, then breaks (counted), fallbacks other than
    `expected_fallbacks`, graphs in Python, warnings; or the error."""
    out = []
    for r in results:
        notes = []
        if "error" in r:
            notes.append(f"error: {r['error']}")
        else:
            notes += first(r)
            counts: dict[str, int] = {}
            for b in r["breaks"]:  # the same break in every layer: once, with a count
                key = b.split(" [called from")[0]
                counts[key] = counts.get(key, 0) + 1
            notes += [f"break (x{n}): {b}" for b, n in counts.items()]
            notes += [f"fallback: {t} x{n}" for t, n in r["fallback_targets"].items() if t not in expected_fallbacks]
            notes += [f"graph runs in Python: {n}" for n in r["in_python"]]
            notes += [f"warning: {w}" for w in r["warnings"]]
        if notes:
            out.append(f"- **{r['model']}**")
            out += [f"  - {n}" for n in notes]
    return "\n".join(out) if out else "(none)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS), help="comma list of " + ", ".join(MODELS))
    ap.add_argument("--rounds", type=int, default=7, help="interleaved timed calls per backend")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per model")
    ap.add_argument("--threads", type=int, help="threads for eager and xjit (default: all cores)")
    ap.add_argument("--no-write", action="store_true", help="print only; keep bench/results/zoo.md")
    ap.add_argument("--out", help="default: bench/results/zoo.md, zoo_train.md with --train")
    ap.add_argument("--train", action="store_true", help="training steps (bench/zoo_train.py)")
    ap.add_argument("--timer", choices=("wall", "cpu"), default="wall", help="--train: wall or process CPU time")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.train:
        from bench import zoo_train
    if args.one:
        result = zoo_train.run_one(args.one, args.rounds, args.timer) if args.train else run_one(args.one, args.rounds)
        print("ZOO-RESULT " + json.dumps(result), flush=True)
        return
    extra = ["--train", "--timer", args.timer] if args.train else []
    rows = zoo_train.table if args.train else table
    results = []
    for name in args.models.split(","):
        r = run_isolated(name, args.rounds, args.timeout, args.threads, extra)
        results.append(r)
        print(rows([r]).splitlines()[-1], flush=True)
    if args.train:
        zoo_train.write(results, args, _header(args))
        return
    text = (
        "# xjit on models beyond the suite (bench/zoo.py)\n\n"
        f"{_header(args)} Inference, fp32, batch 1, sequence {SEQ} (images 128x128), random "
        "weights, small configs. Errors: max over 3 calls against eager; rel = max abs error / max |eager|. "
        f"Times: median of {args.rounds} interleaved samples each (a sample: 1-20 calls, about 50 ms); the machine is shared (2 cores, other "
        "jobs running), so speedups are indicative only.\n\n"
        "status: ok = 1 graph, 0 breaks, no fallback nodes, rel err <= 1e-5; runs = right values but "
        "breaks/fallbacks; MISMATCH = rel err > 1e-5.\n\n"
        + table(results)
        + "\n\n## Breaks, fallbacks, warnings, errors\n\n"
        + details(results)
        + "\n"
    )
    print()
    print(text)
    if not args.no_write:
        Path(args.out or ROOT / "bench" / "results" / "zoo.md").write_text(text)


def _header(args: argparse.Namespace) -> str:
    """Date, versions, cores, threads and load: the first line of both tables."""
    import torch
    import transformers

    return (
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; torch {torch.__version__}, transformers "
        f"{transformers.__version__}, {len(os.sched_getaffinity(0))} cores, "
        f"{args.threads or 'all'} thread(s) for eager and xjit, load average at the end "
        f"{os.getloadavg()[0]:.1f}."
    )


if __name__ == "__main__":
    main()
