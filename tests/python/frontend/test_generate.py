"""Hugging Face `model.generate()` (greedy, KV cache) under xjit.jit with the default automatic
dynamic shapes: the tokens equal eager's, and the growing cache length does not recompile the
forward at every step (bench/generate.py measures the same call on GPT-2 small and LLaMA)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from frontend_fixtures import clean, fe  # noqa: E402,F401 - clean is autouse
from test_dynamic_models import build_with_cache  # noqa: E402

import xjit  # noqa: E402

NEW_TOKENS = 10


def generate(model: Any, ids: Any) -> Any:
    with torch.no_grad():
        return model.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS, do_sample=False
        )


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_generate_gives_eager_tokens_without_a_recompile_per_step(name: str) -> None:
    model = build_with_cache(name)
    ids = torch.randint(1, 300, (1, 5))
    want = generate(model, ids)
    report = xjit.explain(generate)(model, ids)
    assert torch.equal(report.output, want)
    assert report.output.shape[1] == 5 + NEW_TOKENS
    # Prefill, first step (cache length static), then one symbolic step for the other 8 steps.
    forwards = [g for g in report.graphs if g.ops.get("scaled_dot_product_attention", 0) == 2]
    assert 1 <= len(forwards) <= 3, str(report)
    assert len(report.recompiles) <= 2, str(report)


class Settings:
    """A config object like transformers' GenerationConfig: plain attributes, deep-copied."""

    def __init__(self) -> None:
        self.scale = 2.0
        self.names = ["a", "b"]


def scaled_by_copied_settings(x: Any, settings: Settings) -> Any:
    local = copy.deepcopy(settings)
    local.scale += 1.0
    return x * local.scale


def test_deepcopy_of_a_config_object_gives_eager_results() -> None:
    # copy.deepcopy's defaults hold a list (`_nil=[]`): iterating them used to fail the capture.
    x, settings = torch.randn(4), Settings()
    want = scaled_by_copied_settings(x, settings)
    report = xjit.explain(scaled_by_copied_settings)(x, settings)
    torch.testing.assert_close(report.output, want)
    assert settings.scale == 2.0
    assert not any("iterating a tuple (defaults)" in b.reason for b in report.graph_breaks), str(
        report
    )
