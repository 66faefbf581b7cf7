"""Hugging Face GPT-2 and LLaMA with their KV cache (use_cache=True, the configs' default): the
model builds a DynamicCache (a library class) inside the captured code, which the analyzer
models as an abstract instance and rebuilds after the graph runs. Prefill, a decoding step that
passes the cache back in, and greedy generate() must equal eager: logits and every cached tensor."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
fe = pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from frontend_fixtures import clean  # noqa: E402, F401 (autouse fixture)


def build(name: str) -> Any:
    torch.manual_seed(0)
    if name == "gpt2":
        config = transformers.GPT2Config(vocab_size=300, n_embd=32, n_layer=2, n_head=4,
                                         n_positions=64)
        config.bos_token_id = config.eos_token_id = config.pad_token_id = 0
        return transformers.GPT2LMHeadModel(config).eval()
    config = transformers.LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=64,
                                      pad_token_id=0)
    return transformers.LlamaForCausalLM(config).eval()


def assert_same_output(got: Any, want: Any) -> None:
    torch.testing.assert_close(got.logits, want.logits, rtol=1e-4, atol=1e-5)
    gc, wc = got.past_key_values, want.past_key_values
    assert type(gc) is type(wc)
    assert len(gc.layers) == len(wc.layers) and gc.get_seq_length() == wc.get_seq_length()
    for g, w in zip(gc.layers, wc.layers):
        assert type(g) is type(w) and vars(g).keys() == vars(w).keys()
        torch.testing.assert_close(g.keys, w.keys, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(g.values, w.values, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_prefill_and_decode_step_with_the_cache(name: str) -> None:
    model = build(name)
    ids = torch.randint(0, 300, (1, 12))
    compiled = xjit.jit(model, backend="eager")  # the capture is checked; eager is fastest
    with torch.no_grad():
        want = model(ids)
        report = xjit.explain(model)(ids)  # native backend
        external = sum(g.ops.get("external_call", 0) for g in report.graphs)
        assert (report.graph_count, report.graph_break_count, external) == (1, 0, 0), str(report)
        assert_same_output(report.output, want)

        fe.reset()
        fe.set_recording(True)
        got = compiled(ids)
        assert_same_output(got, want)
        got = compiled(ids)  # a new cache object each call, same guards: a cache hit
        assert fe.events()["counters"]["cache_hits"] >= 1
        assert len(fe.events()["graphs"]) == 1

        # One decoding step with the cache passed back in (written in place by the model).
        token = want.logits[:, -1:].argmax(-1)
        want2 = model(token, past_key_values=want.past_key_values)
        report2 = xjit.explain(model, backend="eager")(token, past_key_values=got.past_key_values)
        assert (report2.graph_count, report2.graph_break_count) == (1, 0), str(report2)
        assert_same_output(report2.output, want2)
        assert report2.output.past_key_values is got.past_key_values


def generate(model: Any, ids: Any) -> Any:
    with torch.no_grad():
        return model.generate(ids, max_new_tokens=4, do_sample=False)


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_greedy_generate_gives_eager_tokens(name: str) -> None:
    model = build(name)
    ids = torch.randint(1, 300, (1, 8))
    want = generate(model, ids)
    report = xjit.explain(generate, backend="eager")(model, ids)
    assert torch.equal(report.output, want)
    # Each forward of the generation loop is one whole graph: the prefill, the first decoding
    # step (static cache length), and one with the cache length symbolic (automatic dynamic,
    # symbolic sizes) that serves the later steps.
    forwards = [g for g in report.graphs if g.ops.get("scaled_dot_product_attention", 0) == 2]
    assert len(forwards) == 3, str(report)
