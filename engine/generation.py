"""The generation kernel: ``num_return_sequences`` continuations per prompt, sampled (temperature + top-p) or greedy.

``generate`` decodes through ``engine.decode`` (transformers' tokens exactly, ended rows dropped, a KV cache that
grows in place, ``engine.kv_cache``); with ``fast=True`` the prompts' shared prefixes are prefilled once
(``engine.prefix_cache``). ``generate_naive`` is the baseline it is measured against (``python -m engine bench
sample``). ``stop_token_ids`` is what ends an agent's turn. Plain strings in, plain strings out: nothing here knows
about tasks, plans or the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from engine.decode import DecodeSettings, decode, supports
from engine.kv_cache import growing_cache
from engine.prefix_cache import (
    KV,
    KernelStats,
    TrieNode,
    cache_arg,
    device_of,
    encode_texts,
    necessary_tokens,
    prefill_root,
    prefix_trie,
    stacked_cache,
    walk_trie,
)
from engine.stop_check import between_batches


@dataclass
class GenerationConfig:
    max_new_tokens: int = 128
    temperature: float = 1.0  # 0 means greedy
    top_p: float = 1.0
    num_return_sequences: int = 1
    batch_size: int = 16  # prompts per generate call


def new_tokens(model, tokenizer, input_ids: torch.Tensor, attention: torch.Tensor, cache,
               config: GenerationConfig) -> torch.Tensor:
    """The tokens generated after each row of ``input_ids`` (``cache`` holds a prefix of them, or nothing):
    ``engine.decode`` (ended rows leave the batch; the same tokens as ``generate``), or ``model.generate`` itself
    when the checkpoint's generation config asks for processing that ``decode`` does not implement."""
    if supports(model):
        sample = config.temperature > 0
        settings = DecodeSettings(config.max_new_tokens, tuple(stop_token_ids(model, tokenizer)),
                                  tokenizer.pad_token_id, config.temperature if sample else 0.0,
                                  config.top_p if sample else 1.0)
        return decode(model, input_ids, attention, cache, settings, cache_arg(model))
    generated = model.generate(input_ids=input_ids, attention_mask=attention, num_return_sequences=1,
                               **_sampling_kwargs(tokenizer, config, model), **{cache_arg(model): cache})
    return generated[:, input_ids.shape[1]:]


@torch.no_grad()
def generate_naive(model, tokenizer, prompts: Sequence[str], config: GenerationConfig, *,
                   seed: int | None = None, stats: KernelStats | None = None) -> list[list[str]]:
    """The baseline: left-padded batches per chunk, ``num_return_sequences`` rows per prompt, each prefilling its
    prompt again (what ``model.generate(num_return_sequences=K)`` does), decoded by ``new_tokens``.

    Greedy decoding (temperature 0) takes the prompts longest first, so each chunk holds prompts of about one length
    (less padding, and rows of one kind that tend to stop together: 17% faster on the demo's evaluation, identical
    texts); the outputs come back in the caller's order. Sampling keeps the caller's order: a seeded run draws
    its random numbers row by row, and another order would sample other texts."""
    if seed is not None:
        torch.manual_seed(seed)
    device = device_of(model)
    was_training = model.training
    model.eval()
    k = config.num_return_sequences
    all_encoded = encode_texts(tokenizer, list(prompts))
    order = list(range(len(prompts)))
    if config.temperature <= 0:
        order.sort(key=lambda i: -len(all_encoded[i]))
    by_position: list[list[str]] = [[] for _ in prompts]
    try:
        for start in range(0, len(prompts), config.batch_size):
            between_batches()  # a stage's stop request (engine.stop_check): within one batch, not after them all
            chunk_ids = order[start:start + config.batch_size]
            encoded = [all_encoded[i] for i in chunk_ids]
            width = max(len(ids) for ids in encoded)
            # Left padding keeps every prompt's last token at the same position, where generation starts.
            input_ids = torch.full((len(encoded), width), tokenizer.pad_token_id, dtype=torch.long)
            attention = torch.zeros((len(encoded), width), dtype=torch.long)
            for row, ids in enumerate(encoded):
                input_ids[row, width - len(ids):] = torch.tensor(ids)
                attention[row, width - len(ids):] = 1
            # K rows per prompt, prompt-major: what num_return_sequences=K does inside generate.
            input_ids, attention = input_ids.repeat_interleave(k, 0), attention.repeat_interleave(k, 0)
            cache = growing_cache(model, width + config.max_new_tokens)
            new = new_tokens(model, tokenizer, input_ids.to(device), attention.to(device), cache, config)
            texts = tokenizer.batch_decode(new, skip_special_tokens=True)
            for row, i in enumerate(chunk_ids):
                by_position[i] = [t.strip() for t in texts[row * k:(row + 1) * k]]
            if stats is not None:
                stats.computed += len(encoded) * k * width
                stats.forwards += 1
                stats.necessary += necessary_tokens(encoded)
    finally:  # a stop (or any error) between chunks leaves the model in the mode it came in
        model.train(was_training)
    return by_position


# End-of-turn markers of common chat templates (Llama-3, ChatML: Qwen2.5/SmolLM2, Phi-3, Gemma) and the Lumos layout's
# next user turn: generation stops at whichever of them the tokenizer has as a single token.
END_OF_TURN = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|user|>")


def stop_token_ids(model, tokenizer) -> list[int]:
    """The tokens that end an agent's turn: the tokenizer's EOS, the model's generation-config EOS (one id or a list,
    as instruct checkpoints ship it) and every ``END_OF_TURN`` marker that is one token of this vocabulary."""
    ids: list[int] = []
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in (tokenizer.eos_token_id, config_eos):
        ids += value if isinstance(value, (list, tuple)) else [value]
    vocab = tokenizer.get_vocab()
    ids += [vocab[marker] for marker in END_OF_TURN if marker in vocab]
    return sorted({int(i) for i in ids if i is not None})


def _sampling_kwargs(tokenizer, config: GenerationConfig, model=None) -> dict:
    sample = config.temperature > 0
    kwargs = dict(max_new_tokens=config.max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                  eos_token_id=stop_token_ids(model, tokenizer), do_sample=sample)
    if sample:
        kwargs.update(temperature=config.temperature, top_p=config.top_p, top_k=0)
    return kwargs


@torch.no_grad()
def generate(model, tokenizer, prompts: Sequence[str], config: GenerationConfig, *, seed: int | None = None,
             fast: bool = False, stats: KernelStats | None = None) -> list[list[str]]:
    """``num_return_sequences`` continuations per prompt (text after the prompt, special tokens removed).

    ``fast=True``: shared prefill. Within each chunk of ``batch_size`` prompts, the rows (each prompt repeated
    K times) are arranged in the token trie of ``score_targets``; every shared prefix -- a prompt for its K samples,
    a task's grounder prefix for its plans, the instruction for all tasks -- is computed once. The per-group caches
    are stacked (right-padded, padding masked) under one decoding call (``new_tokens``) that feeds each row's
    remaining prompt tokens (left-padded after the cached part; positions follow the attention mask, so the holes
    are invisible) and then decodes as transformers' samplers do. A fixed seed reproduces the outputs; greedy decoding
    gives the baseline's text up to float rounding (and, since rows consume the RNG in the same order, sampled
    texts matched the baseline's exactly in the benchmarks). ``fast=False``, this function's default, runs
    ``generate_naive``; the sample stage passes ``sample.shared_prefill`` (true by default) through
    ``engine.generators``. Measurements: ``python -m engine bench sample``.
    """
    if not fast:
        return generate_naive(model, tokenizer, prompts, config, seed=seed, stats=stats)
    if seed is not None:
        torch.manual_seed(seed)

    device = device_of(model)
    pad_id = tokenizer.pad_token_id
    was_training = model.training
    model.eval()
    outputs: list[list[str]] = []
    k = config.num_return_sequences
    try:
        for start in range(0, len(prompts), config.batch_size):
            between_batches()  # a stage's stop request (engine.stop_check)
            encoded = encode_texts(tokenizer, list(prompts[start:start + config.batch_size]))
            rows = [ids for ids in encoded for _ in range(k)]  # prompt-major, like num_return_sequences
            caps = [max(0, len(ids) - 1) for ids in rows]  # the last prompt token runs in generate: its logits
            root = prefix_trie(rows, caps)
            groups: list[tuple[TrieNode, KV | None]] = []
            kv = prefill_root(model, rows, root, pad_id, stats)
            walk_trie(model, rows, root, kv, pad_id, max(config.batch_size, 1), stats,
                  lambda node, node_kv, found=groups: found.append((node, node_kv)))
            # Stack the group caches: [groups, heads, cached, dim], right-padded; rows pick their group's cache.
            cached = max(node.end for node, _ in groups)
            group_of = {i: g for g, (node, _) in enumerate(groups) for i in node.leaves}
            order = list(range(len(rows)))
            suffix = max(len(rows[i]) - groups[group_of[i]][0].end for i in order)
            input_ids = torch.full((len(rows), cached + suffix), pad_id, dtype=torch.long)
            attention = torch.zeros((len(rows), cached + suffix), dtype=torch.long)
            for i, ids in enumerate(rows):
                end = groups[group_of[i]][0].end
                input_ids[i, :end] = torch.tensor(ids[:end], dtype=torch.long)
                attention[i, :end] = 1
                rest = ids[end:]
                input_ids[i, cached + suffix - len(rest):] = torch.tensor(rest, dtype=torch.long)
                attention[i, cached + suffix - len(rest):] = 1
            capacity = cached + suffix + config.max_new_tokens
            if cached:
                cache, _ = stacked_cache(model, [node_kv for _, node_kv in groups], [group_of[i] for i in order],
                                         capacity=capacity)
            else:
                cache = growing_cache(model, capacity)
            new = new_tokens(model, tokenizer, input_ids.to(device), attention.to(device), cache, config)
            texts = tokenizer.batch_decode(new, skip_special_tokens=True)
            outputs.extend([t.strip() for t in texts[i * k:(i + 1) * k]] for i in range(len(encoded)))
            if stats is not None:
                stats.computed += len(rows) * suffix
                stats.forwards += 1
                stats.necessary += necessary_tokens(encoded)
    finally:
        model.train(was_training)
    return outputs
