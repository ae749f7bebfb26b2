"""engine.decode and engine.kv_cache: the engine's decoding loop gives transformers' ``generate`` tokens exactly."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers.cache_utils import DynamicLayer

from engine import decode, generation, kv_cache

PROMPTS = ["<|user|>\nx\n<|assistant|>\n", "<|user|>\na much longer task with many more words in it to plan\n"
           "<|assistant|>\n", "<|user|>\nmid size task here\n<|assistant|>\n", "<|user|>\ny\n<|assistant|>\n",
           "<|user|>\nhow many apples are left\n<|assistant|>\n"]


@pytest.fixture
def chatty_planner(tiny_agents):
    """The tiny planner with noise on its weights (the 3-step model stops at once) and one token in seven an end
    token, so that rows end at many different steps and the loop drops rows from its batch."""
    planner, _ = tiny_agents
    model, tokenizer = copy.deepcopy(planner.model), planner.tokenizer
    noise = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for weight in model.parameters():
            weight.add_(torch.randn(weight.shape, generator=noise) * 0.3)
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, *range(3, model.config.vocab_size, 7)]
    return model, tokenizer


@pytest.mark.parametrize("fast", [False, True], ids=["padded", "shared_prefill"])
@pytest.mark.parametrize("temperature, top_p", [(0.0, 1.0), (1.0, 0.95), (0.7, 0.8)])
def test_decode_gives_generates_tokens(chatty_planner, monkeypatch, fast, temperature, top_p):
    model, tokenizer = chatty_planner
    assert decode.supports(model)
    k = 1 if temperature == 0 else 4
    config = generation.GenerationConfig(max_new_tokens=24, temperature=temperature, top_p=top_p,
                                         num_return_sequences=k, batch_size=3)
    drops = []
    real_select = decode.select_rows
    monkeypatch.setattr(decode, "select_rows", lambda cache, rows: (drops.append(len(rows)), real_select(cache, rows)))
    ours = generation.generate(model, tokenizer, PROMPTS, config, seed=3, fast=fast)
    monkeypatch.setattr(decode, "supports", lambda _model: False)  # generation.generate falls back to model.generate
    theirs = generation.generate(model, tokenizer, PROMPTS, config, seed=3, fast=fast)
    assert ours == theirs
    assert drops, "no row left the batch: the test did not exercise what it is for"
    assert len({len(text) for row in ours for text in row}) > 3


def test_a_generation_config_decode_does_not_implement_goes_to_generate(chatty_planner, monkeypatch):
    model, tokenizer = chatty_planner
    model.generation_config.repetition_penalty = 1.3
    assert not decode.supports(model)
    calls = []
    real = model.generate
    monkeypatch.setattr(model, "generate", lambda *a, **kw: (calls.append(kw), real(*a, **kw))[1])
    greedy = generation.GenerationConfig(max_new_tokens=6, temperature=0.0)
    out = generation.generate(model, tokenizer, PROMPTS[:2], greedy)
    assert calls and len(out) == 2


def test_growing_layer_holds_what_a_dynamic_layer_holds():
    """Updates past the capacity, a row selection, a crop: the keys and values stay those of a DynamicLayer."""
    torch.manual_seed(0)
    grow, plain = kv_cache.GrowingLayer(capacity=6), DynamicLayer()

    def both(new_positions: int, rows: int) -> None:
        keys, values = torch.randn(rows, 2, new_positions, 4), torch.randn(rows, 2, new_positions, 4)
        out_grow, out_plain = grow.update(keys, values), plain.update(keys, values)
        assert all(torch.equal(a, b) for a, b in zip(out_grow, out_plain))

    both(4, 5)
    for _ in range(5):  # past the capacity of 6: the buffer doubles
        both(1, 5)
    rows = torch.tensor([0, 2, 3])
    grow.select_rows(rows)
    plain.batch_select_indices(rows)
    both(1, 3)
    grow.crop(-2)
    plain.crop(-2)
    both(2, 3)
    assert grow.get_seq_length() == plain.get_seq_length() == 10
    assert grow._key_buffer.shape[-2] >= 10 and grow.keys.data_ptr() == grow._key_buffer.data_ptr()


def test_growing_cache_replaces_only_full_attention_layers(chatty_planner):
    model, _ = chatty_planner
    cache = kv_cache.growing_cache(model, capacity=32)
    assert cache.layers and all(isinstance(layer, kv_cache.GrowingLayer) for layer in cache.layers)
    data = [(torch.zeros(2, 2, 3, 16), torch.ones(2, 2, 3, 16)) for _ in cache.layers]
    filled = kv_cache.growing_cache(model, capacity=32, data=data)
    assert filled.get_seq_length() == 3 and torch.equal(filled.layers[0].values, data[0][1])
