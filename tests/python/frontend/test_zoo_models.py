"""Models beyond the bench suite (bench/zoo.py), as regression tests: tiny configs of Hugging Face
GPT-Neo, T5 (encoder and decoder), Swin, Mistral, Gemma and Falcon (one key/value head: the
repeat_kv reshape that plan-memory took for a copy), GPT-J (repeat_interleave), wav2vec2
(weight-norm parametrization, an lru_cached probe), Phi, BART and the Whisper encoder, and a
MobileNet-style CNN with depthwise convs, with random weights, through xjit.jit (native backend)
under torch.no_grad() in eval mode: one graph, no graph breaks, no PyTorch fallback nodes, no
warnings, and the output of three calls equal to eager's. Plus the two small patterns behind
what the zoo found broken: torch.finfo/iinfo in a captured frame (a graph break in T5 and
GPT-Neo), and permute(...).contiguous().view(...) (canonicalize dropped the contiguous, so the
native view failed at run time: GPT-Neo and Swin ran in Python with a warning)."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
fe = pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from frontend_fixtures import clean  # noqa: E402, F401 (autouse fixture)

nn = torch.nn
VOCAB = 100
SEQ = 12

Built = tuple[Any, dict[str, Any]]


def _leaves(out: Any) -> list[Any]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):  # transformers' ModelOutput is a dict
        return [t for v in out.values() for t in _leaves(v)]
    if isinstance(out, (list, tuple)):
        return [t for v in out for t in _leaves(v)]
    return []


def _assert_close(out: Any, ref: Any) -> None:
    got, want = _leaves(out), _leaves(ref)
    assert len(got) == len(want) and got
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        scale = max(w.abs().max().item(), 1.0)
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5 * scale)


def _compile_and_check(model: Any, kwargs: dict[str, Any]) -> None:
    """One graph, no breaks, no fallback nodes, no warnings; three calls equal to eager."""
    model = model.eval()
    with torch.no_grad():
        ref = model(**kwargs)
        compiled = xjit.jit(model)
        with warnings.catch_warnings():
            warnings.simplefilter(
                "error", xjit.XjitWarning
            )  # an internal error falls back with one
            report = xjit.explain(compiled)(**kwargs)
            outs = [report.output, compiled(**kwargs), compiled(**kwargs)]
    assert [b.reason for b in report.graph_breaks] == []
    assert report.graph_count == 1, str(report)
    assert not any(g.runs_in_python for g in report.graphs), str(report)
    assert sum(g.ops.get("external_call", 0) for g in report.graphs) == 0, str(report)
    for out in outs:
        _assert_close(out, ref)


def _tokens(seq: int = SEQ) -> Any:
    return torch.randint(0, VOCAB, (1, seq))


def gpt_neo() -> Built:
    t = pytest.importorskip("transformers")
    c = t.GPTNeoConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_layers=2,
        num_heads=4,
        attention_types=[[["global", "local"], 1]],
        window_size=4,  # shorter than SEQ: the local layer's mask matters
        max_position_embeddings=32,
        bos_token_id=0,
        eos_token_id=0,
        use_cache=False,
    )
    return t.GPTNeoForCausalLM(c), {"input_ids": _tokens()}


def t5() -> Built:
    t = pytest.importorskip("transformers")
    c = t.T5Config(
        vocab_size=VOCAB,
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=1,
        num_decoder_layers=1,
        num_heads=4,
    )
    c.use_cache = False
    return t.T5Model(c), {"input_ids": _tokens(), "decoder_input_ids": _tokens(5)}


def swin() -> Built:
    t = pytest.importorskip("transformers")
    c = t.SwinConfig(
        image_size=32, patch_size=4, embed_dim=16, depths=[2], num_heads=[2], window_size=4
    )
    return t.SwinModel(c), {"pixel_values": torch.randn(1, 3, 32, 32)}


def mistral() -> Built:
    t = pytest.importorskip("transformers")
    c = t.MistralConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        sliding_window=4,
        max_position_embeddings=32,
        use_cache=False,
    )
    return t.MistralForCausalLM(c), {"input_ids": _tokens()}


def gemma() -> Built:
    t = pytest.importorskip("transformers")
    c = t.GemmaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=32,
        use_cache=False,
    )
    return t.GemmaForCausalLM(c), {"input_ids": _tokens()}


def falcon() -> Built:
    t = pytest.importorskip("transformers")
    c = t.FalconConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        use_cache=False,
    )
    return t.FalconForCausalLM(c), {"input_ids": _tokens()}


def gptj() -> Built:
    t = pytest.importorskip("transformers")
    c = t.GPTJConfig(
        vocab_size=VOCAB,
        n_embd=32,
        n_layer=1,
        n_head=4,
        rotary_dim=4,
        n_positions=32,
        use_cache=False,
    )
    c.bos_token_id = c.eos_token_id = 0
    return t.GPTJForCausalLM(c), {"input_ids": _tokens()}


def phi() -> Built:
    t = pytest.importorskip("transformers")
    c = t.PhiConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        partial_rotary_factor=0.5,
        max_position_embeddings=32,
        use_cache=False,
    )
    return t.PhiForCausalLM(c), {"input_ids": _tokens()}


def bart() -> Built:
    t = pytest.importorskip("transformers")
    c = t.BartConfig(
        vocab_size=VOCAB,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=32,
        use_cache=False,
    )
    return t.BartModel(c), {"input_ids": _tokens()}


def whisper_encoder() -> Built:
    t = pytest.importorskip("transformers")
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    c = t.WhisperConfig(
        vocab_size=VOCAB,
        d_model=32,
        encoder_layers=1,
        encoder_attention_heads=4,
        encoder_ffn_dim=64,
        num_mel_bins=16,
        max_source_positions=8,
        pad_token_id=0,
        bos_token_id=0,
        eos_token_id=0,
        decoder_start_token_id=0,
    )
    return WhisperEncoder(c), {"input_features": torch.randn(1, 16, 16)}


def wav2vec2() -> Built:
    t = pytest.importorskip("transformers")
    c = t.Wav2Vec2Config(
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=4,
        intermediate_size=64,
        conv_dim=(16, 16),
        conv_stride=(5, 4),
        conv_kernel=(10, 4),
        num_conv_pos_embeddings=8,
        num_conv_pos_embedding_groups=4,
        num_feat_extract_layers=2,
    )
    return t.Wav2Vec2Model(c), {"input_values": torch.randn(1, 400)}


def mobilenet() -> Built:
    """Inverted residual blocks: 1x1 expand, depthwise 3x3 (stride 1 and 2), 1x1 project, ReLU6."""

    def block(cin: int, cout: int, stride: int) -> nn.Module:
        mid = cin * 4
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

    model = nn.Sequential(
        block(3, 8, 2), block(8, 8, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10)
    )
    for m in model.modules():  # non-trivial batch-norm statistics
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)

    class Wrapped(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y: torch.Tensor = self.net(x)
            return y

    return Wrapped(), {"x": torch.randn(1, 3, 16, 16)}


MODELS: dict[str, Callable[[], Built]] = {
    "gpt-neo": gpt_neo,
    "t5": t5,
    "swin": swin,
    "mistral": mistral,
    "gemma": gemma,
    "falcon": falcon,
    "gpt-j": gptj,
    "phi": phi,
    "bart": bart,
    "whisper-encoder": whisper_encoder,
    "wav2vec2": wav2vec2,
    "mobilenet": mobilenet,
}


@pytest.mark.parametrize("name", list(MODELS))
def test_zoo_model_is_one_graph_and_matches_eager(name: str) -> None:
    torch.manual_seed(0)
    model, kwargs = MODELS[name]()
    _compile_and_check(model, kwargs)


def test_finfo_and_iinfo_fold_at_capture_time() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        low = torch.finfo(x.dtype).min
        big = torch.iinfo(torch.int32).max
        masked = torch.where(x > 0, x, torch.tensor(low, dtype=x.dtype))
        return masked + torch.finfo(x.dtype).eps + (big - 2147483647)

    x = torch.randn(8)
    report = xjit.explain(f)(x)
    assert report.graph_count == 1 and report.graph_break_count == 0, str(report)
    torch.testing.assert_close(report.output, f(x), rtol=0, atol=0)
    # float64 input: a new dtype recompiles and folds its own finfo.
    x64 = torch.randn(8, dtype=torch.float64)
    torch.testing.assert_close(xjit.jit(f)(x64), f(x64), rtol=0, atol=0)


def test_contiguous_before_view_is_kept() -> None:
    def merge_heads(w: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        t = torch.matmul(w, v).permute(0, 2, 1, 3).contiguous()
        return t.view(t.size()[:-2] + (t.shape[-2] * t.shape[-1],))

    w, v = torch.randn(1, 4, 8, 8), torch.randn(1, 4, 8, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("error", xjit.XjitWarning)
        out = xjit.jit(merge_heads)(w, v)
    torch.testing.assert_close(out, merge_heads(w, v), rtol=1e-6, atol=1e-6)
    assert out.is_contiguous()


def test_repeat_interleave_with_an_int_is_captured() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return (
            torch.repeat_interleave(x, 2, dim=3),
            x.repeat_interleave(3, -1),
            x.repeat_interleave(2, dim=0),
        )

    x = torch.randn(2, 3, 1, 4)
    report = xjit.explain(f)(x)
    assert report.graph_count == 1 and report.graph_break_count == 0, str(report)
    assert all("external_call" not in g.ops for g in report.graphs), str(report)
    for got, want in zip(report.output, f(x), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_repeat_interleave_forms_it_cannot_capture_still_match_eager() -> None:
    def f(x: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.repeat_interleave(x, r, dim=1), x.repeat_interleave(2)

    x, r = torch.randn(2, 3, 4), torch.tensor([1, 0, 2])
    for got, want in zip(xjit.jit(f)(x, r), f(x, r), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def _probe() -> bool:
    return True


_marked_probe = functools.lru_cache(_probe)
_probe.__dict__["_dynamo_marked_constant"] = True  # what transformers' _make_compile_constant sets


@functools.lru_cache
def _unmarked_probe() -> bool:
    return True


def test_lru_cached_trace_time_constant_is_called_at_capture_time() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x + 1 if _marked_probe() else x - 1

    x = torch.randn(4)
    report = xjit.explain(f)(x)
    assert report.graph_count == 1 and report.graph_break_count == 0, str(report)
    torch.testing.assert_close(report.output, x + 1, rtol=0, atol=0)


def test_unmarked_lru_cached_function_is_not_folded() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x + 1 if _unmarked_probe() else x - 1

    x = torch.randn(4)
    report = xjit.explain(f)(x)
    assert report.graph_break_count == 1, str(report)
    torch.testing.assert_close(report.output, x + 1, rtol=0, atol=0)


@pytest.mark.parametrize("dim", [0, 2, None])
@pytest.mark.parametrize("style", ["parametrization", "hook"])
def test_weight_norm_is_captured(dim: int | None, style: str) -> None:
    conv = nn.Conv1d(4, 6, 3, padding=1)
    if style == "parametrization":
        conv = nn.utils.parametrizations.weight_norm(conv, dim=dim)
    else:
        with warnings.catch_warnings():  # torch.nn.utils.weight_norm is deprecated
            warnings.simplefilter("ignore", FutureWarning)
            conv = nn.utils.weight_norm(conv, dim=dim)
    magnitude = conv.weight_g if style == "hook" else conv.parametrizations.weight.original0
    with torch.no_grad():
        magnitude.uniform_(0.5, 2.0)  # not ||v||: the division by the norm matters
    x = torch.randn(2, 4, 9)
    with torch.no_grad():
        ref = conv(x)
        report = xjit.explain(conv)(x)
    assert report.graph_count == 1 and report.graph_break_count == 0, str(report)
    assert all("external_call" not in g.ops for g in report.graphs), str(report)
    torch.testing.assert_close(report.output, ref, rtol=1e-5, atol=1e-5)
