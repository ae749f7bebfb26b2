"""The optional packages a run config asks for, checked before the run starts (``engine.preflight`` calls it).

``check_packages(config)`` raises ``ConfigError`` naming the field (and the curriculum phase whose ``set`` asked) when
a package the run will need is not installed: a training section's ``report_to`` logging integration (transformers
would raise when that stage's trainer is built), or vLLM for ``sample.backend`` / ``ground.backend = "vllm"`` (raised
when that stage starts). Without this check either failed only after the stages before it had run: the grounder's
vLLM after an iteration's sampling, scoring and DPO.
"""

from __future__ import annotations

from engine.config import RunConfig
from engine.errors import ConfigError


def check_packages(config: RunConfig) -> None:
    """Every iteration's config is checked: the base config's, then each curriculum phase's (its ``set`` applied),
    whose errors name the phase when the value is the phase's own (see the module docstring)."""
    from engine.schedule import iteration_config

    _check(config, config, "")
    first = 1
    for index, phase in enumerate(config.schedule.phases, start=1):
        _check(iteration_config(config, first), config, f" (set by schedule.phases[{index}])")
        first += phase.iterations


def _check(config: RunConfig, base: RunConfig, phase: str) -> None:
    from transformers.integrations.integration_utils import get_available_reporting_integrations

    available = None
    for section in ("dpo", "grpo", "grpo_grounder", "sft"):
        name = getattr(config, section).report_to
        if name in ("none", "all"):
            continue
        available = get_available_reporting_integrations() if available is None else available
        if name not in available:
            where = phase if name != getattr(base, section).report_to else ""
            raise ConfigError(f"{section}.report_to", f"{name}{where}: its package is not installed in this "
                                                      f"environment (installed: {', '.join(available) or 'none'}); "
                                                      "install it or set report_to = \"none\"")
    for section in ("sample", "ground"):
        if getattr(config, section).backend == "vllm":
            from engine.vllm_backend import require_vllm_installed

            require_vllm_installed(f"{section}.backend", phase if getattr(base, section).backend != "vllm" else "")
