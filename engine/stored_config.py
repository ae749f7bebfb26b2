"""Reading a run's config as the store holds it (``runs.config``): ``stored_config(data)`` is
``engine.config.config_from_dict`` without the fields of ``NO_EFFECT_FIELDS``, which a run made before they were
refused in new configs may carry: the run still loads and computes what it computed."""

from __future__ import annotations

from typing import Any

from engine.config import RunConfig, config_from_dict

# Fields a stored run may hold that never had an effect and are refused in new configs since: dropped when a stored
# snapshot is read (``stored_config``), so the run still loads and computes what it computed.
NO_EFFECT_FIELDS = ("grpo.max_length", "grpo_grounder.max_length")


def stored_config(data: dict[str, Any]) -> RunConfig:
    """The config of a run as the store holds it (``runs.config``): ``config_from_dict`` without the fields of
    ``NO_EFFECT_FIELDS``, which a run made before they were refused may carry."""
    data = {k: dict(v) if isinstance(v, dict) else v for k, v in (data or {}).items()}
    for dotted in NO_EFFECT_FIELDS:
        section, name = dotted.split(".")
        if isinstance(data.get(section), dict):
            data[section].pop(name, None)
    return config_from_dict(data)
