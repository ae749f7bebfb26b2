"""A decoding KV cache that grows in place: transformers' ``DynamicCache`` with each full-attention layer writing
into a preallocated buffer instead of concatenating.

Contract: ``growing_cache(model, capacity, data)`` returns a ``DynamicCache`` (so ``generate`` and every model
accept it unchanged) whose plain ``DynamicLayer``s are ``GrowingLayer``s; other layer kinds (sliding-window,
linear-attention) are left as transformers builds them. A ``GrowingLayer`` holds the same keys and values as a
``DynamicLayer`` would -- ``keys``/``values`` are views of the first ``length`` positions of its buffer -- so
attention sees the same numbers; only the copying differs.

Why: ``DynamicLayer.update`` runs ``torch.cat`` on every decoding step, copying the whole cache each time. For the
demo's sample stage (240 rows, up to 160 positions, 4 layers) that is ~300 MB moved per token, the largest single
cost of decoding on a CPU (``python -m engine bench sample`` measures both). Writing the new position into a buffer
sized for the whole generation (``capacity`` = prompt + new tokens) costs one small copy per step.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


class GrowingLayer(DynamicLayer):
    """A ``DynamicLayer`` whose ``update`` writes into a buffer of ``capacity`` positions (doubling when full).

    Anything else that replaces ``keys``/``values`` (``batch_select_indices``, ``reorder_cache``, ``crop``...) is
    inherited; the next ``update`` notices that they are no longer a view of the buffer and starts a new one from
    them, so every inherited operation stays correct.
    """

    def __init__(self, capacity: int = 0) -> None:
        super().__init__()
        self.capacity = capacity
        self._key_buffer: torch.Tensor | None = None
        self._value_buffer: torch.Tensor | None = None

    def _buffer_holds_cache(self, rows: int) -> bool:
        buffer = self._key_buffer
        return (buffer is not None and self.keys.dim() == 4 and self.keys.data_ptr() == buffer.data_ptr()
                and self.values.data_ptr() == self._value_buffer.data_ptr() and self.keys.shape[0] == rows
                and buffer.shape[0] == rows)

    def _rebuffer(self, key_states: torch.Tensor, value_states: torch.Tensor, length: int, needed: int) -> None:
        """New buffers of at least ``needed`` positions holding the ``length`` cached ones."""
        old = self._key_buffer.shape[-2] if self._key_buffer is not None else 0
        size = max(needed, self.capacity) if needed <= max(old, self.capacity) else max(needed, 2 * old)
        rows, heads, _, dim = key_states.shape
        keys = key_states.new_empty((rows, heads, size, dim))
        values = value_states.new_empty((rows, value_states.shape[1], size, value_states.shape[-1]))
        if length:
            keys[:, :, :length].copy_(self.keys)
            values[:, :, :length].copy_(self.values)
        self._key_buffer, self._value_buffer = keys, values

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        length = self.keys.shape[-2] if self.keys.dim() == 4 else 0
        needed = length + key_states.shape[-2]
        if not (self._buffer_holds_cache(key_states.shape[0]) and needed <= self._key_buffer.shape[-2]):
            self._rebuffer(key_states, value_states, length, needed)
        self._key_buffer[:, :, length:needed].copy_(key_states)
        self._value_buffer[:, :, length:needed].copy_(value_states)
        self.keys = self._key_buffer[:, :, :needed]
        self.values = self._value_buffer[:, :, :needed]
        return self.keys, self.values

    def select_rows(self, rows: torch.Tensor) -> None:
        """Keep only ``rows`` (batch indices), in a buffer of the same capacity: decoding goes on without a copy."""
        length = self.keys.shape[-2]
        if not self._buffer_holds_cache(self.keys.shape[0]):
            self.batch_select_indices(rows)
            return
        keys = self._key_buffer.new_empty((len(rows), *self._key_buffer.shape[1:]))
        values = self._value_buffer.new_empty((len(rows), *self._value_buffer.shape[1:]))
        keys[:, :, :length].copy_(self.keys.index_select(0, rows))
        values[:, :, :length].copy_(self.values.index_select(0, rows))
        self._key_buffer, self._value_buffer = keys, values
        self.keys, self.values = keys[:, :, :length], values[:, :, :length]

    def reset(self) -> None:
        self._key_buffer = self._value_buffer = None
        super().reset()


def growing_cache(model, capacity: int, data: list[tuple[torch.Tensor, torch.Tensor]] | None = None) -> DynamicCache:
    """An empty (or ``data``-filled: per layer ``(keys, values)``) cache for ``model`` whose full-attention layers
    grow in place up to ``capacity`` positions before they need to reallocate."""
    cache = DynamicCache(config=model.config)
    if not cache.layers:  # a config transformers cannot map to layer kinds: one growing layer per decoder layer
        cache.layers = [GrowingLayer(capacity) for _ in range(model.config.get_text_config().num_hidden_layers)]
    cache.layers = [GrowingLayer(capacity) if type(layer) is DynamicLayer else layer for layer in cache.layers]
    for layer, (keys, values) in zip(cache.layers, data or []):
        layer.update(keys, values)
    return cache


def select_rows(cache, rows: torch.Tensor) -> None:
    """Keep only batch rows ``rows`` of every layer of ``cache`` (a growing layer keeps its spare capacity)."""
    for layer in cache.layers:
        if isinstance(layer, GrowingLayer):
            layer.select_rows(rows)
        else:
            layer.batch_select_indices(rows)
