"""The Spaces policy: what a run may be when the studio serves a Hugging Face Space (``Ctx.spaces``): only the demo
agents (``DEMO_AGENTS``, no adapters), the reference critic, no external QA model, in-process hf generation and
training, and every size within its cap (``SPACES_CAPS``), a schedule phase's settings included.

``spaces_policy`` refuses any other config with a ``ConfigError`` naming the field (refused rather than silently
changed, so the run is the config the visitor saw); ``spaces_capped`` gives a config that passes (the Run tab's
starting config on Spaces, the first visit's showcase run). Nothing here keeps state between calls.
"""

from __future__ import annotations

from engine.config import RunConfig
from engine.config_checks import apply_settings
from engine.errors import ConfigError

DEMO_AGENTS = ("assets/demo/planner", "assets/demo/grounder")
# Spaces mode: (dotted field, largest value allowed).
SPACES_CAPS = (("data.train_limit", 16), ("data.eval_limit", 20), ("sample.k", 4), ("run.iterations", 1))


def spaces_policy(config: RunConfig) -> RunConfig:
    """Spaces mode: only the demo agents (no adapters), the reference critic, no external QA model, in-process hf
    generation and training, every size within its cap;
    anything else raises ``ConfigError`` naming the field (refused rather than silently changed, so the run is the
    config the visitor saw). ``spaces_capped`` gives a config that passes."""
    for role, path in zip(("planner", "grounder"), DEMO_AGENTS):
        agent = getattr(config, role)
        if agent.path.rstrip("/") != path:
            raise ConfigError(f"{role}.path", f"only the demo agent {path} is allowed on Spaces")
        if agent.adapter:
            raise ConfigError(f"{role}.adapter", "no adapters on Spaces: only the demo agents run there")
    if config.critic.backend != "reference":
        raise ConfigError("critic.backend", "only the reference critic is allowed on Spaces")
    if config.tools.qa_base_url:  # a visitor must not make the Space call arbitrary URLs
        raise ConfigError("tools.qa_base_url", "no external QA model on Spaces (leave it empty)")
    for dotted, allowed in (("sample.backend", "hf"), ("ground.backend", "hf"), ("launch.mode", "inprocess")):
        section, name = dotted.split(".")
        if getattr(getattr(config, section), name) != allowed:
            raise ConfigError(dotted, f"only {allowed} on Spaces")
    for dotted, cap in SPACES_CAPS:
        section, name = dotted.split(".")
        value = getattr(getattr(config, section), name)
        if value == 0 or value > cap:  # 0 means "all" for the limits
            raise ConfigError(dotted, f"at most {cap} on Spaces (0, meaning all, is not allowed either)")
    for index, phase in enumerate(config.schedule.phases, start=1):  # a phase's settings must not lift a cap
        where = f"schedule.phases[{index}].set"
        phase_config = apply_settings(config, phase.set, where)
        phase_config.schedule.phases = []
        try:
            spaces_policy(phase_config)
        except ConfigError as exc:
            raise ConfigError(where, f"{exc.field}: {exc.message}") from None
    return config


def spaces_capped(config: RunConfig) -> RunConfig:
    """``config`` with the demo agents, the reference critic and every size within its Spaces cap."""
    for role, path in zip(("planner", "grounder"), DEMO_AGENTS):
        getattr(config, role).path, getattr(config, role).adapter = path, ""
    config.critic.backend = "reference"
    config.tools.qa_base_url = config.tools.qa_model = ""
    config.sample.backend = config.ground.backend = "hf"
    config.launch.mode = "inprocess"
    for dotted, cap in SPACES_CAPS:
        section, name = dotted.split(".")
        value = getattr(getattr(config, section), name)
        if value == 0 or value > cap:
            setattr(getattr(config, section), name, cap)
    return config
