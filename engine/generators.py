"""Generation backends: the one place that chooses how a stage generates text.

Stages open one generator per stage run and close it at the end: ``hf`` wraps ``engine.generation.generate`` on the
agent's in-memory model (nothing to open or close), ``vllm`` starts a vLLM engine on the checkpoint directory
(``engine/vllm_backend.py``, imported only when chosen). Both return ``list[list[str]]``: per prompt,
``num_return_sequences`` stripped continuations with special tokens removed.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.generation import GenerationConfig, generate


class HFGenerator:
    """The default backend: ``generate(model, tokenizer, ...)`` on an already loaded model."""

    def __init__(self, model, tokenizer, shared_prefill: bool = False):
        self.model, self.tokenizer, self.shared_prefill = model, tokenizer, shared_prefill

    def generate(self, prompts: Sequence[str], config: GenerationConfig, seed: int | None = None) -> list[list[str]]:
        return generate(self.model, self.tokenizer, prompts, config, seed=seed, fast=self.shared_prefill)

    def close(self) -> None:
        """Nothing to release: the model belongs to the stage context's agent cache."""


def generator_for(backend: str, agent, path: str, *, field: str, dtype: str = "auto", options=None,
                  shared_prefill: bool = False):
    """The generator a stage uses: ``hf`` on ``agent``'s model, or ``vllm`` on the checkpoint at ``path``.

    ``field`` names the config field that chose the backend (``sample.backend``) so a missing vLLM install is
    reported against it; ``options`` is the config's ``[vllm]`` section (None: its defaults); ``shared_prefill``
    picks ``generate(fast=True)`` for ``hf`` (vLLM shares prefixes by itself). Call ``close()`` when done: a vLLM
    engine holds GPU memory that the training stages need.
    """
    if backend == "hf":
        return HFGenerator(agent.model, agent.tokenizer, shared_prefill)
    if backend == "vllm":
        from engine.vllm_backend import VLLMGenerator

        return VLLMGenerator(path, dtype=dtype, tokenizer=agent.tokenizer, field=field, options=options)
    raise ValueError(f"{field}: unknown generation backend {backend!r} (hf | vllm)")
