"""The ``hf`` critic: a local transformers checkpoint judging groundings with the same prompt and parser.

Contract: ``HFCritic(config).judge(items)`` returns one ``Verdict`` per item, in order, and never raises: a model
that cannot be loaded or a failed generation batch gives ``error`` verdicts with the exception as ``raw``.

* Model: ``critic.model`` (a local directory or hub id), loaded on the first ``judge`` call with
  ``engine.models.load_model`` (device/dtype ``auto``) and kept.
* Prompt: ``critic_messages(item)`` rendered with ``tokenizer.apply_chat_template(..., add_generation_prompt=True)``
  when the tokenizer has a chat template, else with the plain ``<|system|>/<|user|>/<|assistant|>`` layout of
  ``engine.prompts.render_chat``.
* Generation: ``engine.generation.generate`` with ``max_new_tokens=critic.max_tokens``, ``critic.temperature``,
  ``critic.top_p``, a fixed seed, ``critic.concurrency`` prompts per batch.
* ``finish_reason``: ``generate`` returns decoded text only, so the completion is re-tokenized:
  ``completion_tokens`` is that count and ``finish_reason`` is ``"length"`` when it reaches ``max_tokens``, else
  ``"stop"``. Re-tokenizing can give a few tokens fewer than were generated, so a reply cut exactly at the limit
  may be reported as ``"stop"``; the parser then still classifies a half-written correction as ``unparsed``.
* Per verdict: ``backend="hf"``, ``model``, ``latency_s`` (the batch's wall time shared evenly), prompt and
  completion token counts, ``finish_reason``, ``status``, the raw text.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from engine.config import CriticSection
from engine.critics.base import Grounding, Verdict
from engine.critics.parsing import parse_response
from engine.critics.prompts import Message, critic_messages
from engine.prompts import render_chat

log = logging.getLogger(__name__)
SEED = 0


class HFCritic:
    name = "hf"

    def __init__(self, config: CriticSection, *, device: str = "auto", dtype: str = "auto"):
        self.config, self.device, self.dtype = config, device, dtype
        self._model: Any = None
        self._tokenizer: Any = None

    def judge(self, items: list[Grounding]) -> list[Verdict]:
        if not items:
            return []
        try:
            self._load()
        except Exception as exc:
            return [self._error(exc) for _ in items]
        verdicts: list[Verdict] = []
        size = max(1, self.config.concurrency)
        for start in range(0, len(items), size):
            verdicts += self._judge_batch(items[start:start + size])
        return verdicts

    def _load(self) -> None:
        if self._model is None:
            from engine import models

            spec = models.ModelSpec(self.config.model, dtype=self.dtype, device=self.device)
            self._model, self._tokenizer = models.load_model(spec)

    def render(self, messages: list[Message]) -> str:
        """The prompt text: the tokenizer's chat template when it has one, else the plain layout."""
        if getattr(self._tokenizer, "chat_template", None):
            return render_chat(messages, "tokenizer", self._tokenizer, add_generation_prompt=True)
        return render_chat(messages, "lumos", self._tokenizer, add_generation_prompt=True)

    def _judge_batch(self, items: list[Grounding]) -> list[Verdict]:
        from engine import generation

        start = time.perf_counter()
        try:
            prompts = [self.render(critic_messages(item)) for item in items]
            gen = generation.GenerationConfig(max_new_tokens=self.config.max_tokens,
                                              temperature=self.config.temperature, top_p=self.config.top_p,
                                              batch_size=len(prompts))
            outputs = generation.generate(self._model, self._tokenizer, prompts, gen, seed=SEED)
        except Exception as exc:
            log.warning("hf critic batch failed: %s", exc)
            return [self._error(exc) for _ in items]
        latency = (time.perf_counter() - start) / len(items)
        return [self._verdict(prompt, texts[0] if texts else "", latency) for prompt, texts in zip(prompts, outputs)]

    def _count(self, text: str) -> int:
        return len(self._tokenizer(text, add_special_tokens=False)["input_ids"]) if text else 0

    def _verdict(self, prompt: str, text: str, latency: float) -> Verdict:
        completion_tokens = self._count(text)
        finish = "length" if completion_tokens >= self.config.max_tokens else "stop"
        fields = parse_response(text, finish)
        return Verdict(backend=self.name, model=self.config.model, latency_s=latency,
                       prompt_tokens=self._count(prompt), completion_tokens=completion_tokens, **fields)

    def _error(self, exc: BaseException) -> Verdict:
        return Verdict("error", self.name, model=self.config.model, raw=f"{type(exc).__name__}: {exc}")
