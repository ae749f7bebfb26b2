"""The scoring kernel: the mean negative log-likelihood of each target (its tokens plus EOS) given its prompt.

Prompt and target are tokenized separately and concatenated; prompt and padding positions are masked, so a batched
result equals scoring the pair alone (right padding never changes the logits of earlier positions). ``score_targets``
shares the KV cache of common prefixes (``engine.prefix_cache``); ``score_targets_naive`` is the padded-batch
baseline it is measured against (``python -m engine bench score``). Plain strings in, plain floats out: nothing here
knows about tasks, plans or the store.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from engine.prefix_cache import (
    KV,
    KernelStats,
    TrieNode,
    device_of,
    encode_texts,
    forward_on_groups,
    length_batches,
    necessary_tokens,
    prefill_root,
    prefix_trie,
    walk_trie,
)
from engine.stop_check import between_batches


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


def _keep_batch(results: list[float], batch: list[int], nll: torch.Tensor, width: int,
                stats: KernelStats | None) -> None:
    """A scored batch's mean NLLs into ``results`` (by row index), and its forward counted in ``stats``."""
    for r, i in enumerate(batch):
        results[i] = float(nll[r])
    if stats is not None:
        stats.computed += len(batch) * width
        stats.forwards += 1


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
    try:
        for start in range(0, len(order_), batch_size):
            between_batches()  # a stage's stop request (engine.stop_check)
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
            _keep_batch(results, batch, _row_nll(logits[:, :-1], labels[:, 1:].to(device)), width, stats)
    finally:
        model.train(was_training)
    if stats is not None:
        stats.necessary += necessary_tokens([ids for ids, _ in rows])
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
            between_batches()  # a stage's stop request (engine.stop_check)
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
            _keep_batch(results, batch, _row_nll(logits, labels.to(device)), width, stats)
    finally:
        model.train(was_training)
    if stats is not None:
        stats.necessary += necessary_tokens(ids)
    return [results[j] for j in slot]
