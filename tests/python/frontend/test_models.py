"""Real models through the frontend: the bench suite's models (bench/models.py) and Hugging Face
BERT, GPT-2, LLaMA and ViT built from small configs with random weights (no downloads), run
under torch.no_grad() in eval mode through xjit.jit with each backend and compared with eager
PyTorch. Each model's graph count, graph breaks and PyTorch fallback nodes (external_call) are
asserted as achieved, so a regression in what the analyzer captures shows up here."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
fe = pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from frontend_fixtures import clean  # noqa: E402, F401 (autouse fixture)

REPO = Path(__file__).resolve().parents[3]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
from bench import models as bench_models  # noqa: E402

nn = torch.nn


def _transformers() -> Any:
    return pytest.importorskip("transformers")


def bert() -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
    t = _transformers()
    config = t.BertConfig(
        vocab_size=300,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    ids = torch.randint(0, 300, (2, 12))
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, 8:] = 0  # a padded sequence: the attention mask matters
    return t.BertModel(config), (ids,), {"attention_mask": mask}


def gpt2() -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
    t = _transformers()
    config = t.GPT2Config(
        vocab_size=300, n_embd=32, n_layer=2, n_head=4, n_positions=64, use_cache=False
    )
    config.bos_token_id = config.eos_token_id = 0
    return t.GPT2LMHeadModel(config), (torch.randint(0, 300, (1, 12)),), {}


def llama() -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
    t = _transformers()
    config = t.LlamaConfig(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,  # grouped-query attention
        max_position_embeddings=64,
        use_cache=False,
    )
    return t.LlamaForCausalLM(config), (torch.randint(0, 300, (1, 12)),), {}


def vit() -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
    t = _transformers()
    config = t.ViTConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        image_size=16,
        patch_size=4,
    )
    return t.ViTModel(config, add_pooling_layer=False), (torch.randn(1, 3, 16, 16),), {}


def mlp() -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
    return bench_models.MLP((24, 32, 32, 10)), (torch.randn(3, 24),), {}


def resnet() -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
    return bench_models.ResNet18(num_classes=10), (torch.randn(1, 3, 32, 32),), {}


def lstm() -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
    return (
        bench_models.LSTMLM(vocab=50, embed=8, hidden=16, layers=2),
        (torch.randint(0, 50, (2, 5)),),
        {},
    )


# name -> (builder, graphs, graph breaks, PyTorch fallback nodes): what the frontend achieves.
MODELS: dict[str, tuple[Callable[[], Any], int, int, int]] = {
    "mlp": (mlp, 1, 0, 0),
    "resnet18": (resnet, 1, 0, 0),
    "lstm": (lstm, 1, 0, 0),
    "bert": (bert, 1, 0, 0),
    "gpt2": (gpt2, 1, 0, 0),
    "llama": (llama, 1, 0, 0),
    "vit": (vit, 1, 0, 0),
}


def tensors(out: Any) -> list[Any]:
    """The tensors of a model output (ModelOutput, tuple, dict, tensor), in order."""
    if isinstance(out, torch.Tensor):
        return [out]
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return [t for item in out for t in tensors(item)]
    return []


def assert_same(got: Any, want: Any) -> None:
    assert type(got) is type(want)
    g, w = tensors(got), tensors(want)
    assert len(g) == len(w) and g
    for a, b in zip(g, w):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def build(name: str) -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
    torch.manual_seed(0)
    model, args, kwargs = MODELS[name][0]()
    return model.eval(), args, kwargs


@pytest.mark.parametrize("name", list(MODELS))
def test_model_graphs_and_outputs(name: str) -> None:
    _, graphs, breaks, fallbacks = MODELS[name]
    model, args, kwargs = build(name)
    with torch.no_grad():
        want = model(*args, **kwargs)
        report = xjit.explain(model)(*args, **kwargs)
    assert_same(report.output, want)
    external = sum(g.ops.get("external_call", 0) for g in report.graphs)
    assert (report.graph_count, report.graph_break_count, external) == (
        graphs,
        breaks,
        fallbacks,
    ), str(report)
    assert not any(g.runs_in_python for g in report.graphs)


@pytest.mark.parametrize("backend", ["xjit", "eager"])
@pytest.mark.parametrize("name", list(MODELS))
def test_model_second_call_hits_the_cache(name: str, backend: str) -> None:
    model, args, kwargs = build(name)
    compiled = xjit.jit(model, backend=backend)
    with torch.no_grad():
        want = model(*args, **kwargs)
        assert_same(compiled(*args, **kwargs), want)
        hits = fe.events()["counters"]["cache_hits"]
        assert_same(compiled(*args, **kwargs), want)
    assert fe.events()["counters"]["cache_hits"] > hits


def predict(model: nn.Module, ids: Any) -> Any:
    with torch.no_grad():
        return model(ids)


def test_no_grad_inside_the_compiled_function_runs_the_graph() -> None:
    # Called with grad enabled and parameters that require grad: every op runs under the
    # frame's own no_grad, so the graph (not Python) runs, and its results are eager's.
    model, args, _ = build("gpt2")
    report = xjit.explain(predict)(model, *args)
    assert report.graph_count == 1 and not report.graphs[0].runs_in_python
    with torch.no_grad():
        want = model(*args)
    assert_same(report.output, want)
    # Without no_grad the frame is a training step (compiled forward and backward under an
    # autograd Function): the same values, and logits that carry a gradient.
    report = xjit.explain(lambda m, ids: m(ids))(model, *args)
    assert not report.graphs[0].runs_in_python, report.graphs[0].note
    assert report.graphs[0].note.startswith("training step"), report.graphs[0].note
    assert report.output.logits.requires_grad
    assert_same(report.output.logits.detach(), want.logits)


@pytest.mark.parametrize("backend", ["xjit", "eager"])
@pytest.mark.parametrize("name", ["mlp"])
def test_model_with_a_symbolic_batch(name: str, backend: str) -> None:
    # dynamic=True: one graph with a symbolic batch dim serves every batch size. (ResNet-18 with
    # symbolic batch and image sizes: test_dynamic_shapes.py; the HF models with a symbolic
    # sequence length: test_dynamic_models.py.)
    model, args, _ = build(name)
    compiled = xjit.jit(model, backend=backend, dynamic=True)
    with torch.no_grad():
        for batch in (3, 2, 5):
            x = args[0][:1].repeat(batch, *[1] * (args[0].dim() - 1))
            assert_same(compiled(x), model(x))
    assert fe.events()["counters"]["compiles"] == 1
