"""Hugging Face BERT, GPT-2 and LLaMA (small configs, random weights) with a dynamic sequence
length. The sizes these models take from the length (BERT's `position_ids[:, 0:seq]` and
`token_type_ids.expand(batch, seq)`, the `arange` of positions) are symbolic size attributes
evaluated at run time (docs/ir.md, "Symbolic sizes in attributes"), so one capture serves every
length instead of one capture per length. Outputs must equal eager, on the native backend: any
xjit warning (a graph run by the interpreter fallback, a frame in Python) fails the test."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

torch = pytest.importorskip("torch")
fe = pytest.importorskip("xjit._frontend")
import xjit  # noqa: E402
from frontend_fixtures import clean, counters  # noqa: E402, F401 (autouse fixture)
from test_models import bert, gpt2, llama  # noqa: E402

LENGTHS = (12, 9, 17, 5)
BUILDERS = {"bert": bert, "gpt2": gpt2, "llama": llama}


def inputs(name: str, length: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    ids = torch.randint(1, 300, (2 if name == "bert" else 1, length))
    if name != "bert":
        return (ids,), {}
    mask = torch.ones_like(ids)
    mask[1, length // 2 :] = 0  # a padded sequence: the attention mask matters
    return (ids,), {"attention_mask": mask}


def first_output(out: Any) -> Any:
    return out.last_hidden_state if hasattr(out, "last_hidden_state") else out.logits


def run_lengths(name: str, dynamic: bool | None) -> None:
    torch.manual_seed(0)
    model, _, _ = BUILDERS[name]()
    model.eval()
    compiled = xjit.jit(model, backend="xjit", dynamic=dynamic)
    with warnings.catch_warnings():
        warnings.simplefilter("error", xjit.XjitWarning)
        with torch.no_grad():
            for length in LENGTHS:
                args, kwargs = inputs(name, length)
                got = first_output(compiled(*args, **kwargs))
                want = first_output(model(*args, **kwargs))
                assert got.shape == want.shape
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert counters()["frames_in_python"] == 0


@pytest.mark.parametrize("name", ["bert", "gpt2", "llama"])
def test_one_compile_for_every_sequence_length(name: str) -> None:
    run_lengths(name, dynamic=True)
    assert counters()["compiles"] == 1, counters()


@pytest.mark.parametrize("name", ["bert", "gpt2", "llama"])
def test_automatic_dynamic_compiles_at_most_twice(name: str) -> None:
    # The first capture is static; the first length change recompiles with the length symbolic,
    # and that capture serves the remaining lengths.
    run_lengths(name, dynamic=None)
    assert counters()["compiles"] <= 2, counters()


def build_with_cache(name: str) -> Any:
    import transformers

    torch.manual_seed(0)
    if name == "gpt2":
        config = transformers.GPT2Config(
            vocab_size=300, n_embd=32, n_layer=2, n_head=4, n_positions=64
        )
        config.bos_token_id = config.eos_token_id = config.pad_token_id = 0
        return transformers.GPT2LMHeadModel(config).eval()
    config = transformers.LlamaConfig(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=0,
    )
    return transformers.LlamaForCausalLM(config).eval()


def generate(model: Any, ids: Any) -> Any:
    with torch.no_grad():
        return model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False)


NEW_TOKENS = 6


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_greedy_generate_with_the_kv_cache(name: str, dynamic: bool | None) -> None:
    # dynamic=True: the prefill is one capture and the decoding step another, whose cache length
    # (the cache's keys are attributes of an object that is not a module: inputs, not state) is
    # symbolic, its arange(past, past + 1) and mask sizes symbolic attributes: it serves every
    # step. Automatic dynamic (None): the first decoding step is captured with the cache length
    # static, the second makes it symbolic. Before symbolic sizes, every step was a capture of
    # its own. (Prompt length 5: not the head dim 8, which would share its symbol.)
    model = build_with_cache(name)
    ids = torch.randint(1, 300, (1, 5))
    want = generate(model, ids)
    report = xjit.explain(generate, dynamic=dynamic)(model, ids)
    assert torch.equal(report.output, want)
    forwards = [g for g in report.graphs if g.ops.get("scaled_dot_product_attention", 0) == 2]
    assert len(forwards) == (2 if dynamic else 3), str(report)


def test_size_one_after_a_symbolic_capture_recompiles() -> None:
    # The capture decides `x.shape[0] == 1` as False (a symbolic size is at least 2, as in
    # torch.compile); a call with size 1 must not reuse it: the tensor guard checks size >= 2.
    def f(x: Any) -> Any:
        if x.shape[0] == 1:
            return x + 1
        return torch.zeros(x.shape[0], x.shape[1] // 2) + x[:, : x.shape[1] // 2]

    compiled = xjit.jit(f, dynamic=True)
    for rows in (3, 5, 1, 4):
        x = torch.randn(rows, 4)
        torch.testing.assert_close(compiled(x), f(x))
    assert counters()["compiles"] == 2, counters()  # rows 3 (symbolic, reused by 5 and 4), 1
