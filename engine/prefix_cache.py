"""Shared-prefix KV-cache machinery behind the fast kernels of ``engine.scoring`` and ``engine.generation``.

Token rows are arranged in a trie by shared prefix; each shared prefix is run once with ``use_cache=True`` and its
keys/values reused for every continuation below it (the K plans of a task share the grounder prompt; the K samples
of a prompt share its prefill). ``walk_trie`` computes the trie level by level, batching the segments of every node
at one depth into shared forwards over stacked parent caches (``forward_on_groups``); ``stacked_cache`` is how rows
of different nodes share one forward. ``KernelStats`` counts computed vs necessary tokens. Plain tensors in, plain
tensors out: nothing here knows about tasks or prompts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from engine.stop_check import between_batches


def device_of(model) -> torch.device:
    return next(model.parameters()).device


def encode_texts(tokenizer, texts: Sequence[str]) -> list[list[int]]:
    # No special tokens: prompts are rendered in full (chat layout included) by engine.prompts.
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]


@dataclass
class KernelStats:
    """Token accounting of one kernel call, filled when a caller passes ``stats=``.

    ``computed``: tokens run through the model (padding included; for ``generate`` the prompt prefill only).
    ``necessary``: the minimum -- every distinct token prefix of the rows once (the size of their token trie), so
    ``computed / necessary`` is 1.0 at best. ``forwards``: model forward calls (prefill only for ``generate``).
    """

    computed: int = 0
    necessary: int = 0
    forwards: int = 0

    @property
    def ratio(self) -> float:
        return self.computed / max(self.necessary, 1)


def necessary_tokens(rows: Sequence[Sequence[int]]) -> int:
    """Distinct token prefixes of ``rows`` (= nodes of their trie): in sorted order each row adds what it does not
    share with its predecessor."""
    total, previous = 0, ()
    for row in sorted(tuple(r) for r in rows):
        total += len(row) - _lcp(previous, row)
        previous = row
    return total


def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


MIN_SAVING = 8  # tokens a trie node must save ((members - 1) x segment), or it is not worth its bookkeeping
# The root is its own forward (a level of one node): it must save more, and be long enough to be worth a forward --
# with the demo tokenizer the shared instruction is 3 tokens, cheaper to recompute per task than to run alone.
MIN_ROOT_SAVING, MIN_ROOT_TOKENS = 64, 16
# Close a batch of segments before its padding exceeds this share of it AND this many tokens: a forward has a fixed
# cost, so a few padded tokens are cheaper than splitting a level or the leaves into one more forward.
MAX_PAD_FRACTION, PAD_SLACK_TOKENS = 0.1, 64


@dataclass
class TrieNode:
    start: int  # the parent's cache covers ids[:start]
    end: int  # this node's cache covers ids[:end] of every member
    rep: int  # a member whose ids[start:end] is the segment
    children: list[TrieNode]
    leaves: list[int]


def _build_tree(ids: Sequence[Sequence[int]], caps: Sequence[int], members: list[int], start: int,
                root: bool = False) -> TrieNode:
    """Radix node over ``members`` (sorted by ids) below ``start``; ``caps[i]``: most tokens of row i a cache may
    hold (the token before the first one whose logits we need must be computed in the leaf)."""
    first, last = ids[members[0]], ids[members[-1]]  # sorted: the first and last share the group's common prefix
    split = end = min(min(caps[i] for i in members), _lcp(first, last))  # members branch after ``split`` tokens
    if root and ((len(members) - 1) * end < MIN_ROOT_SAVING or end < MIN_ROOT_TOKENS):
        end = 0  # not worth a root forward: children still branch at ``split`` but recompute [0, split) themselves
    node = TrieNode(start, end, members[0], [], [])
    group: list[int] = []

    def close(group: list[int]) -> None:
        if len(group) < 2:
            node.leaves.extend(group)
            return
        ext = min(min(caps[i] for i in group), _lcp(ids[group[0]], ids[group[-1]])) - end
        if (len(group) - 1) * ext >= MIN_SAVING:
            node.children.append(_build_tree(ids, caps, group, end))
        else:
            node.leaves.extend(group)

    for i in members:
        if caps[i] <= split:
            node.leaves.append(i)
        elif group and ids[group[0]][split] != ids[i][split]:
            close(group)
            group = [i]
        else:
            group.append(i)
    close(group)
    return node


def prefix_trie(rows: Sequence[Sequence[int]], caps: Sequence[int]) -> TrieNode:
    members = sorted(range(len(rows)), key=lambda i: rows[i])
    return _build_tree(rows, caps, members, 0, root=True)


def length_batches(items: list[int], lengths: dict[int, int] | Sequence[int], batch_size: int) -> list[list[int]]:
    """Length-sorted batches of at most ``batch_size`` whose padding stays within ``MAX_PAD_FRACTION`` of the batch
    or ``PAD_SLACK_TOKENS`` tokens, whichever is larger."""
    batches: list[list[int]] = []
    batch: list[int] = []
    total = 0
    for i in sorted(items, key=lambda i: lengths[i]):
        n = lengths[i]
        padded = n * (len(batch) + 1)  # sorted: this row is the longest so far
        if batch and (len(batch) >= batch_size
                      or padded - (total + n) > max(MAX_PAD_FRACTION * padded, PAD_SLACK_TOKENS)):
            batches.append(batch)
            batch, total = [], 0
        batch.append(i)
        total += n
    if batch:
        batches.append(batch)
    return batches


KV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer (keys, values), batch 1, shape [1, heads, length, dim]


def cache_arg(model) -> str:
    # transformers 5.x calls the cache argument ``cache``; 4.x called it ``past_key_values``.
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def forward_on(model, segments: list[list[int]], kv: KV | None, past: int, pad_id: int, *, logits: bool):
    """Run right-padded ``segments`` on top of ``kv`` (covering ``past`` tokens, shared by every row).

    Returns ``(logits [B, W, V] or None, cache)``; the cache holds ``past + W`` positions per row.
    """
    from transformers import DynamicCache

    device = device_of(model)
    width, n = max(len(s) for s in segments), len(segments)
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)
    attention = torch.ones((n, past + width), dtype=torch.long)
    attention[:, past:] = 0
    for r, seg in enumerate(segments):
        input_ids[r, :len(seg)] = torch.tensor(seg)
        attention[r, past:past + len(seg)] = 1
    if kv:
        cache = DynamicCache(ddp_cache_data=[(k.expand(n, -1, -1, -1), v.expand(n, -1, -1, -1)) for k, v in kv],
                             config=model.config)
    else:
        cache = DynamicCache(config=model.config)
    positions = torch.arange(past, past + width, device=device).unsqueeze(0).expand(n, -1)
    kwargs = {cache_arg(model): cache}
    if not logits:
        kwargs["logits_to_keep"] = 1  # a cache-only forward: skip the LM head on every position but one
    out = model(input_ids=input_ids.to(device), attention_mask=attention.to(device), position_ids=positions,
                use_cache=True, **kwargs)
    return (out.logits if logits else None), cache


def _row_kv(cache, row: int, length: int) -> KV:
    # Clone: a view would keep the whole batch's cache alive while the subtree runs.
    return [(layer.keys[row:row + 1, :, :length].clone(), layer.values[row:row + 1, :, :length].clone())
            for layer in cache.layers]


def walk_trie(model, rows: Sequence[Sequence[int]], root: TrieNode, kv: KV | None, pad_id: int, batch_size: int,
              stats: KernelStats | None, visit) -> None:
    """Compute the cache of every trie node below ``root`` (whose cache is ``kv``) and hand ``(node, cache)`` to
    ``visit`` for each node with leaves.

    Level by level: the segments of ALL nodes at one depth run together in length-sorted batches, each row on top
    of its own parent's cache (``forward_on_groups``), so the number of forwards grows with the trie's depth, not
    with its number of nodes -- a forward of a ~100M model has a large fixed cost on a CPU.
    """
    level: list[tuple[TrieNode, KV | None]] = [(root, kv)]
    while level:
        nxt: list[tuple[TrieNode, KV | None]] = []
        jobs = []  # (child, index of its parent in ``level``)
        for p, (node, node_kv) in enumerate(level):
            if node.leaves:
                visit(node, node_kv)
            jobs += [(child, p) for child in node.children]
        lengths = [child.end - child.start for child, _ in jobs]
        for batch in length_batches(list(range(len(jobs))), lengths, batch_size):
            between_batches()  # a stage's stop request (engine.stop_check): the shared prompts are most of the work
            parents = sorted({jobs[j][1] for j in batch})
            local = {p: i for i, p in enumerate(parents)}
            segments = [list(rows[jobs[j][0].rep][jobs[j][0].start:jobs[j][0].end]) for j in batch]
            _, cache, longest = forward_on_groups(
                model, segments, [level[p][1] for p in parents], [level[p][0].end for p in parents],
                [local[jobs[j][1]] for j in batch], pad_id, logits=False)
            if stats is not None:
                stats.computed += len(batch) * max(len(seg) for seg in segments)
                stats.forwards += 1
            for r, j in enumerate(batch):
                child = jobs[j][0]
                nxt.append((child, _holey_row_kv(cache, r, child.start, longest, child.end - child.start)))
            del cache
        level = nxt


def _holey_row_kv(cache, row: int, past: int, longest: int, length: int) -> KV:
    """Row ``row``'s cache as one contiguous prefix: its own ``past`` positions, then its ``length`` new ones that
    sit after the stacked (padded) part of ``longest`` positions. Copies, so the batch's cache can be freed."""
    out = []
    for layer in cache.layers:
        k, v = layer.keys[row:row + 1], layer.values[row:row + 1]
        out.append((torch.cat([k[:, :, :past], k[:, :, longest:longest + length]], dim=2),
                    torch.cat([v[:, :, :past], v[:, :, longest:longest + length]], dim=2)))
    return out


def prefill_root(model, rows, root: TrieNode, pad_id: int, stats: KernelStats | None) -> KV | None:
    if root.end == 0:
        return None
    _, cache = forward_on(model, [list(rows[root.rep][:root.end])], None, 0, pad_id, logits=False)
    if stats is not None:
        stats.computed += root.end
        stats.forwards += 1
    return _row_kv(cache, 0, root.end)


def stacked_cache(model, kvs: Sequence[KV | None], index: Sequence[int], capacity: int = 0):
    """One ``DynamicCache`` for a batch whose row r continues the cached prefix ``kvs[index[r]]``; with
    ``capacity``, one that grows in place up to that many positions (``engine.kv_cache``: for decoding).

    The prefixes differ in length: each is right-padded to the longest (``None`` = nothing cached, all padding), so
    a caller must mask positions ``[len(prefix), longest)`` of row r and give its new tokens positions from
    ``len(prefix)`` on. Returns ``(cache, longest)``; ``(None, 0)`` when nothing is cached at all.
    """
    from transformers import DynamicCache

    present = [kv for kv in kvs if kv is not None]
    if not present:
        return None, 0
    longest = max(kv[0][0].shape[2] for kv in present)
    device = present[0][0][0].device
    rows = torch.tensor(list(index), device=device)
    layers = []
    for layer in range(len(present[0])):
        keys, values = [], []
        for kv in kvs:
            k, v = kv[layer] if kv is not None else (present[0][layer][0][:, :, :0], present[0][layer][1][:, :, :0])
            pad = longest - k.shape[2]
            keys.append(torch.nn.functional.pad(k, (0, 0, 0, pad)))
            values.append(torch.nn.functional.pad(v, (0, 0, 0, pad)))
        layers.append((torch.cat(keys)[rows], torch.cat(values)[rows]))
    if capacity:
        from engine.kv_cache import growing_cache

        return growing_cache(model, capacity, layers), longest
    return DynamicCache(ddp_cache_data=layers, config=model.config), longest


def forward_on_groups(model, segments: Sequence[Sequence[int]], kvs: Sequence[KV | None], ends: Sequence[int],
                      index: Sequence[int], pad_id: int, *, logits: bool = True):
    """Run right-padded ``segments`` where row r continues the cached prefix ``kvs[index[r]]`` of
    ``ends[index[r]]`` tokens: segments of many trie nodes in ONE forward (a small forward of a ~100M model costs
    several times more per token than a large one on a CPU, so batching across nodes is what makes sharing pay).

    Returns ``(logits [B, W, V] or None, cache, longest)``: the cache holds row r's prefix in ``[0, ends)`` (then
    padding up to ``longest``) and its new tokens from ``longest`` on.
    """
    from transformers import DynamicCache

    device = device_of(model)
    cache, longest = stacked_cache(model, kvs, index)
    width, n = max(len(s) for s in segments), len(segments)
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)
    attention = torch.zeros((n, longest + width), dtype=torch.long)
    positions = torch.zeros((n, width), dtype=torch.long)
    for r, seg in enumerate(segments):
        past = ends[index[r]]
        input_ids[r, :len(seg)] = torch.tensor(list(seg), dtype=torch.long)
        attention[r, :past] = 1  # the row's own prefix; [past, longest) is another group's padding
        attention[r, longest:longest + len(seg)] = 1
        positions[r] = torch.arange(past, past + width)
    if cache is None:
        cache = DynamicCache(config=model.config)
    kwargs = {cache_arg(model): cache}
    if not logits:
        kwargs["logits_to_keep"] = 1  # a cache-only forward: skip the LM head on every position but one
    out = model(input_ids=input_ids.to(device), attention_mask=attention.to(device),
                position_ids=positions.to(device), use_cache=True, **kwargs)
    return (out.logits if logits else None), cache, longest
