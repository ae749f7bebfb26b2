"""Critic backends for the ``critique`` stage: ``reference`` (offline, gold-guided), ``openai``, ``hf``.

``make_critic(config, store)`` builds the backend ``config.backend`` names; backends import their heavy
dependencies (openai, torch) only when chosen.
"""

from __future__ import annotations

from typing import Any

from engine.config import CriticSection
from engine.critics.base import Critic


def make_critic(config: CriticSection, store: Any = None, seed: int = 0) -> Critic:
    """The critic ``config.backend`` names; ``store`` gives the OpenAI backend its response cache; ``seed`` fixes
    which items a reference critic with ``error_rate`` gets wrong."""
    if config.backend == "reference":
        from engine.critics.reference import ReferenceCritic

        return ReferenceCritic(error_rate=config.error_rate, seed=seed)
    if config.backend == "openai":
        from engine.critics.openai_backend import OpenAICritic

        return OpenAICritic(config, store)
    if config.backend == "hf":
        from engine.critics.hf import HFCritic

        return HFCritic(config)
    raise NotImplementedError(f"critic backend {config.backend!r} is not available yet")
