"""Loading causal LMs (local dir or hub id, optional LoRA adapter) and the two kernels the loop runs on them.

- ``generate``: batched sampling or greedy decoding of one or several continuations per prompt, decoded by
  ``engine.decode`` (transformers' tokens exactly, ended rows dropped, a KV cache that grows in place).
- ``score_targets``: the mean negative log-likelihood of each target (its tokens plus EOS) given its prompt. Prompt
  and target are tokenized separately and concatenated, prompt and padding positions are masked, so a batched
  result equals scoring the pair alone (right padding never changes the logits of earlier positions).

Both take plain strings and return plain Python values; they know nothing about tasks, plans or the store. Which
backend a stage generates with (these kernels or vLLM) is chosen in ``engine.generators``.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.errors import CheckpointError
from engine.precision import native_bf16
from engine.prefix_cache import (
    KV,
    KernelStats,
    TrieNode,
    cache_arg,
    device_of,
    encode_texts,
    forward_on_groups,
    length_batches,
    necessary_tokens,
    prefill_root,
    prefix_trie,
    stacked_cache,
    walk_trie,
)

logger = logging.getLogger(__name__)


@dataclass
class ModelSpec:
    path: str  # local directory or hub id
    adapter: str | None = None  # LoRA adapter directory applied on top (merged for inference)
    dtype: str = "auto"  # auto | float32 | bfloat16 | float16; auto = bf16 on a CUDA GPU with bf16, else fp32
    device: str = "auto"  # auto | cpu | cuda | cuda:N | map (accelerate device_map="auto")


def resolve_device(device: str = "auto") -> torch.device:
    """The device a model runs on; for ``map`` (spread by accelerate) the device of its first layers."""
    if device in ("auto", "map"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":  # bf16 weights only on a GPU that computes bf16 natively; CPU inference stays fp32
        return torch.bfloat16 if device.type == "cuda" and native_bf16(device) else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]


def load_tokenizer(path: str):
    """The tokenizer at ``path``; one without a pad token pads with EOS (logged), as TRL's trainers do.

    Padding positions are masked everywhere (scoring, generation, training), so the stand-in never changes a
    result; a tokenizer with neither a pad nor an EOS token raises ``CheckpointError`` (nothing could end a plan).
    """
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:  # many base LMs ship without one; EOS is the usual stand-in
        if tokenizer.eos_token is None:
            raise CheckpointError("<tokenizer>", f"{path}: the tokenizer has neither a pad token nor an EOS token; "
                                                 "add an EOS token (generation must be able to stop)")
        logger.warning("%s: the tokenizer has no pad token; padding with its EOS token %r", path, tokenizer.eos_token)
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


# In a run's adapter checkpoint: {"base": the model it was trained on, "base_adapter": that model's own configured
# LoRA adapter ("" for none; only the configured model has one, as in runtime.load_agent)}.
ADAPTER_BASE = "moat_base.json"


def is_adapter_checkpoint(path: str | Path) -> bool:
    """A run's LoRA checkpoint: an adapter (``adapter_config.json``) saying which model it was trained on."""
    return (Path(path) / ADAPTER_BASE).is_file()


def adapter_chain(path: str | Path) -> tuple[ModelSpec, list[str]]:
    """``(the full model, [adapter dirs, oldest first])`` behind a checkpoint path: an iteration's adapter names the
    model it started from, which may itself be the previous iteration's adapter."""
    adapters: list[str] = []
    current, base_adapter = str(path), ""
    while is_adapter_checkpoint(current):
        adapters.append(current)
        found = json.loads((Path(current) / ADAPTER_BASE).read_text(encoding="utf-8"))
        current, base_adapter = found["base"], found.get("base_adapter", "")
        if current in adapters:
            raise ValueError(f"{path}: the adapter checkpoints' bases form a loop")
    return ModelSpec(current, base_adapter or None), adapters[::-1]


def save_adapter_checkpoint(model, tokenizer, out: str | Path, base: str, base_adapter: str = "") -> None:
    """Write a trained ``PeftModel``'s adapter (not the base weights), the tokenizer and the model it applies to."""
    out = Path(out)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    write_adapter_base(out, base, base_adapter)


def write_adapter_base(out: str | Path, base: str, base_adapter: str = "") -> None:
    """Name the model an adapter checkpoint applies to (what makes the directory a loadable checkpoint)."""
    (Path(out) / ADAPTER_BASE).write_text(json.dumps({"base": str(base), "base_adapter": base_adapter or ""}),
                                          encoding="utf-8")


def load_model(spec: ModelSpec, *, trainable: bool = False):
    """Return ``(model, tokenizer)``; an adapter is merged so inference runs on plain weights. ``spec.path`` may be an
    adapter checkpoint of a run: its chain back to the full model is loaded and merged in order."""
    from transformers import AutoModelForCausalLM

    if is_adapter_checkpoint(spec.path):
        from peft import PeftModel

        base, adapters = adapter_chain(spec.path)
        model, _ = load_model(ModelSpec(base.path, base.adapter, spec.dtype, spec.device), trainable=False)
        for adapter in adapters:
            model = PeftModel.from_pretrained(model, adapter).merge_and_unload()
        model.train(trainable)
        return model, load_tokenizer(spec.path)
    device = resolve_device(spec.device)
    spread = spec.device == "map"  # accelerate places the layers (GPUs first, then CPU); never moved afterwards
    model = AutoModelForCausalLM.from_pretrained(spec.path, dtype=resolve_dtype(spec.dtype, device),
                                                 **({"device_map": "auto"} if spread else {}))
    if spec.adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, spec.adapter).merge_and_unload()
    if not spread:
        model.to(device)
    model.train(trainable)
    return model, load_tokenizer(spec.adapter or spec.path)


def score_rows(tokenizer, prompts: Sequence[str], targets: Sequence[str],
               max_length: int | None) -> list[tuple[list[int], int]]:
    """``(ids, n_label)`` per pair: prompt + target + EOS ids (truncated at the start to ``max_length``, keeping
    the target) whose last ``n_label`` tokens are scored. ``len(ids) - n_label >= 1`` whenever ``ids`` has 2+ tokens:
    the first scored token always has a predecessor."""
    if len(prompts) != len(targets):
        raise ValueError(f"{len(prompts)} prompts but {len(targets)} targets")
    rows = []
    for p, t in zip(encode_texts(tokenizer, prompts), encode_texts(tokenizer, targets)):
        ids = p + t + [tokenizer.eos_token_id]
        if max_length is not None:
            ids = ids[-max_length:]  # keep the target: truncate the prompt's start
        rows.append((ids, max(0, min(len(t) + 1, len(ids) - 1))))
    return rows


def _row_nll(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean NLL per row of ``labels`` (-100 = not scored) predicted by ``logits`` at the same positions."""
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    mask = labels != -100
    token_lp = logprobs.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1) * mask
    return -(token_lp.sum(-1) / mask.sum(-1).clamp(min=1))


@torch.no_grad()
def score_targets_naive(model, tokenizer, prompts: Sequence[str], targets: Sequence[str], *, batch_size: int = 16,
                        max_length: int | None = None, order: str = "length",
                        stats: KernelStats | None = None) -> list[float]:
    """The baseline scorer: full rows in right-padded batches, nothing shared.

    ``order="length"`` sorts rows by length (less padding), ``"arrival"`` batches them as given (the paper code's
    way); ``batch_size=1`` is one pair at a time. Results come back in input order.
    """
    rows = score_rows(tokenizer, prompts, targets, max_length)
    order_ = list(range(len(rows)))
    if order == "length":
        order_.sort(key=lambda i: len(rows[i][0]))
    elif order != "arrival":
        raise ValueError(f"order must be length or arrival, not {order!r}")
    device = device_of(model)
    results: list[float] = [math.nan] * len(rows)
    was_training = model.training
    model.eval()
    for start in range(0, len(order_), batch_size):
        batch = order_[start:start + batch_size]
        width = max(len(rows[i][0]) for i in batch)
        input_ids = torch.full((len(batch), width), tokenizer.pad_token_id, dtype=torch.long)
        attention = torch.zeros((len(batch), width), dtype=torch.long)
        labels = torch.full((len(batch), width), -100, dtype=torch.long)
        for r, i in enumerate(batch):
            ids, n_label = rows[i]
            input_ids[r, :len(ids)] = torch.tensor(ids)
            attention[r, :len(ids)] = 1
            if n_label:
                labels[r, len(ids) - n_label:len(ids)] = torch.tensor(ids[len(ids) - n_label:])
        logits = model(input_ids=input_ids.to(device), attention_mask=attention.to(device)).logits
        nll = _row_nll(logits[:, :-1], labels[:, 1:].to(device))
        for r, i in enumerate(batch):
            results[i] = float(nll[r])
        if stats is not None:
            stats.computed += len(batch) * width
            stats.forwards += 1
    if stats is not None:
        stats.necessary += necessary_tokens([ids for ids, _ in rows])
    model.train(was_training)
    return results


# -- shared-prefix kernels -------------------------------------------------------------------------------------------
#
# Rows are arranged in a compressed token trie (a radix tree). A node's KV cache covers ``ids[:end]`` of all its
# members; its children extend it by a shared segment, its leaves are rows whose remaining tokens ``ids[end:]`` run
# on top of it. The trie is computed level by level: the segments of every node at one depth run together in
# length-sorted batches, each row on top of its own parent's cache (caches stacked, right-padded, padding masked,
# positions per row), and each row's cache is then copied out without the padding, so every cache we keep is exact.
# Leaves of all nodes are scored the same way. Forwards therefore grow with the trie's depth, not its size: on a CPU
# a small forward of a ~100M model costs several times more per token than a large one (engine/bench/RESULTS.md).


@torch.no_grad()
def score_targets(model, tokenizer, prompts: Sequence[str], targets: Sequence[str], *, batch_size: int = 16,
                  max_length: int | None = None, fast: bool = True, stats: KernelStats | None = None) -> list[float]:
    """Mean NLL (natural log) per target token, EOS included; ``exp`` of it is the perplexity.

    ``fast=True`` (default): shared token prefixes (the K plans of a task share the grounder prompt up to the plan;
    tasks share the instruction; a plan sampled twice is one row) are computed once and their KV cache reused for
    every continuation; equal to ``score_targets_naive`` up to float rounding (~1e-6 in fp32) and 3.3x faster than
    padded batches for a 114M model here (``bench score``). ``fast=False`` is the length-sorted padded baseline.
    Returns one value per pair, in input order.
    """
    if not fast:
        return score_targets_naive(model, tokenizer, prompts, targets, batch_size=batch_size,
                                   max_length=max_length, stats=stats)
    all_rows = score_rows(tokenizer, prompts, targets, max_length)
    if not all_rows:
        return []
    # Identical rows (a plan sampled twice for the same task) are scored once: their results are the same number.
    first: dict[tuple[tuple[int, ...], int], int] = {}
    slot = [first.setdefault((tuple(r[0]), r[1]), len(first)) for r in all_rows]
    rows = [(list(key[0]), key[1]) for key in first]
    results: list[float] = [math.nan] * len(rows)
    ids = [r[0] for r in rows]
    caps = [max(0, len(i) - n - 1) for i, n in rows]
    root = prefix_trie(ids, caps)
    device = device_of(model)
    pad_id = tokenizer.pad_token_id
    was_training = model.training
    model.eval()

    # Every node with leaves is a group: walk the trie once to compute the groups' caches, then score the leaves of
    # ALL groups in length-sorted batches, each row on top of its own group's cache (stacked, padding masked).
    groups: list[tuple[TrieNode, KV | None]] = []
    try:
        kv = prefill_root(model, ids, root, pad_id, stats)
        walk_trie(model, ids, root, kv, pad_id, batch_size, stats,
                  lambda node, node_kv: groups.append((node, node_kv)))
        group_of = {i: g for g, (node, _) in enumerate(groups) for i in node.leaves}
        ends = [node.end for node, _ in groups]
        lengths = {i: len(ids[i]) - ends[g] for i, g in group_of.items()}
        for batch in length_batches(sorted(group_of), lengths, batch_size):
            segments = [ids[i][ends[group_of[i]]:] for i in batch]
            used = sorted({group_of[i] for i in batch})  # only this batch's groups go into its stacked cache
            local = {g: j for j, g in enumerate(used)}
            logits, _, _ = forward_on_groups(model, segments, [groups[g][1] for g in used], [ends[g] for g in used],
                                             [local[group_of[i]] for i in batch], pad_id)
            width = logits.shape[1]
            labels = torch.full((len(batch), width), -100, dtype=torch.long)
            for r, i in enumerate(batch):
                seg, n_label = segments[r], rows[i][1]
                if n_label:  # label at segment position j is predicted by the logits at j - 1
                    labels[r, len(seg) - n_label - 1:len(seg) - 1] = torch.tensor(seg[len(seg) - n_label:])
            nll = _row_nll(logits, labels.to(device))
            for r, i in enumerate(batch):
                results[i] = float(nll[r])
            if stats is not None:
                stats.computed += len(batch) * width
                stats.forwards += 1
    finally:
        model.train(was_training)
    if stats is not None:
        stats.necessary += necessary_tokens(ids)
    return [results[j] for j in slot]


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
    from engine.decode import DecodeSettings, decode, supports

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
    for start in range(0, len(prompts), config.batch_size):
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
        from engine.kv_cache import growing_cache

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
                from engine.kv_cache import growing_cache

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
