"""The decoding loop under ``engine.generation``: transformers' own sampling loop, minus the rows that are done.

Contract: ``decode(model, input_ids, attention_mask, cache, settings)`` returns the new tokens, ``[rows, steps]``,
padded after each row's end, and -- for the same inputs, seed and settings -- the same tokens as
``model.generate(..., do_sample=..., temperature=..., top_p=..., top_k=0)`` with the transformers version pinned
here (``tests/test_decode.py`` holds the two side by side, greedy and sampled, with and without a cached prefix).
It only covers what ``engine.generation`` asks of ``generate``: greedy, or temperature + nucleus sampling, stopping at
a set of end tokens or after ``max_new_tokens``. ``supports(model)`` says when a checkpoint's generation config asks
for more (a repetition penalty, banned words...): then ``generate`` is used as before.

Why: ``generate`` keeps feeding every row until the last one ends. Sampling 15 plans per task, half of the row-steps
of the demo's sample stage belonged to plans that had already ended. Here a row that ended is dropped from the batch
(the cache, the mask and the positions of the others are kept) once a quarter of the batch has ended, so the
waste is bounded without re-copying the cache on every step.

What keeps the tokens identical: the same model inputs as ``generate`` builds (positions from the attention mask,
the 2D mask, ``logits_to_keep=1``), the same logits processing (``TemperatureLogitsWarper`` then
``TopPLogitsWarper``, as transformers orders them), and the same random numbers: ``torch.multinomial(probs, 1)``
draws one Exp(1) per row and token and takes ``argmax(probs / q)``; here ``q`` is drawn for the batch as
``generate`` would still hold it, dropped rows included, so every later row sees the numbers it would have seen.
A row's logits do not depend on which other rows share its batch (the kernels here compute rows independently;
the test would fail if a backend did not).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch

from engine.kv_cache import select_rows

# Generation-config fields whose non-default values add a logits processor or a stopping rule that ``decode`` does
# not implement. Sampling settings are not here: ``engine.generation`` always passes them explicitly.
_UNSUPPORTED = ("repetition_penalty", "encoder_repetition_penalty", "no_repeat_ngram_size", "bad_words_ids",
                "min_length", "min_new_tokens", "forced_bos_token_id", "forced_eos_token_id", "suppress_tokens",
                "begin_suppress_tokens", "sequence_bias", "exponential_decay_length_penalty", "min_p", "typical_p",
                "epsilon_cutoff", "eta_cutoff", "guidance_scale", "watermarking_config", "renormalize_logits",
                "remove_invalid_values", "stop_strings", "max_time", "num_beams", "penalty_alpha",
                "prefill_chunk_size", "diversity_penalty", "length_penalty", "low_memory", "assistant_model")

# Drop the ended rows once this share of the batch has ended (each drop copies the cache of the rows kept).
COMPACT_WHEN_ENDED = 0.25


@dataclass(frozen=True)
class DecodeSettings:
    max_new_tokens: int
    end_ids: tuple[int, ...]
    pad_id: int
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0


def supports(model) -> bool:
    """True when ``model``'s generation config asks for nothing beyond what ``decode`` implements."""
    from transformers import GenerationConfig

    config = getattr(model, "generation_config", None)
    if config is None:
        return True
    default = GenerationConfig()
    return all(getattr(config, name, None) == getattr(default, name, None) for name in _UNSUPPORTED)


def _next_token_scores(logits: torch.Tensor, settings: DecodeSettings) -> torch.Tensor:
    """transformers' warpers, same order and arithmetic: temperature (when not 1), then nucleus (when below 1)."""
    scores = logits
    if settings.temperature != 1.0:
        scores = scores / settings.temperature
    if settings.top_p < 1.0:
        sorted_logits, sorted_indices = torch.sort(scores, descending=False)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        remove_sorted = cumulative <= (1 - settings.top_p)
        remove_sorted[..., -1:] = 0  # min_tokens_to_keep = 1
        remove = remove_sorted.scatter(1, sorted_indices, remove_sorted)
        scores = scores.masked_fill(remove, -float("inf"))
    return scores


@torch.no_grad()
def decode(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, cache, settings: DecodeSettings,
           cache_arg: str = "past_key_values") -> torch.Tensor:
    """New tokens for each row of ``input_ids`` (``[rows, width]``; ``cache`` holds its first
    ``cache.get_seq_length()`` positions already: zero for an empty one). Returns ``[rows, steps]``: ``pad_id``
    after a row's end token, ``steps`` = the longest row (at most ``max_new_tokens``)."""
    rows, width = input_ids.shape
    device = input_ids.device
    sample = settings.temperature > 0
    end_ids = torch.tensor(sorted(settings.end_ids), dtype=torch.long, device=device)
    positions = (attention_mask.long().cumsum(-1) - 1).masked_fill(attention_mask == 0, 0)
    past = cache.get_seq_length()
    out = torch.full((rows, settings.max_new_tokens), settings.pad_id, dtype=torch.long, device=device)
    live = torch.arange(rows, device=device)  # original row of each row still in the batch
    running = torch.ones(rows, dtype=torch.bool, device=device)  # per row still in the batch: not ended yet
    step_input, step_positions, mask = input_ids[:, past:], positions[:, past:], attention_mask
    extra = {cache_arg: cache}
    if "logits_to_keep" in inspect.signature(model.forward).parameters:
        extra["logits_to_keep"] = 1  # as generate does: the LM head on the last position only
    steps = 0
    for step in range(settings.max_new_tokens):
        outputs = model(input_ids=step_input.contiguous(), attention_mask=mask,
                        position_ids=step_positions.contiguous(), use_cache=True, return_dict=True, **extra)
        logits = outputs.logits[:, -1].to(dtype=torch.float32, device=device)  # a spread model ends elsewhere
        del outputs
        if sample:
            probs = torch.softmax(_next_token_scores(logits, settings), dim=-1)
            # torch.multinomial(probs, 1) is argmax(probs / q), q ~ Exp(1) drawn for every row generate would hold.
            q = torch.empty((rows, probs.shape[-1]), dtype=probs.dtype, device=device).exponential_(1)
            tokens = (probs / q[live]).argmax(dim=-1)
        else:
            tokens = logits.argmax(dim=-1)
        tokens = torch.where(running, tokens, torch.full_like(tokens, settings.pad_id))
        out[live, step] = tokens
        steps = step + 1
        running = running & ~torch.isin(tokens, end_ids)
        if not bool(running.any()):
            break
        if step + 1 == settings.max_new_tokens:
            break
        if float((~running).sum()) >= COMPACT_WHEN_ENDED * len(running):
            keep = running.nonzero().squeeze(1)
            select_rows(cache, keep)
            live, running, tokens = live[keep], running[keep], tokens[keep]
            mask, step_positions = mask[keep], step_positions[keep]
        step_input = tokens[:, None]
        step_positions = step_positions[:, -1:] + 1
        mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=-1)
    return out[:, :steps]
