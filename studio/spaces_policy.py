"""The Spaces policy: what a run may be when the studio serves a Hugging Face Space (``Ctx.spaces``): only the demo
agents (``DEMO_AGENTS``, no adapters), the reference critic, no external QA model, in-process hf generation and
training, and every size within its cap (``SPACES_CAPS``), a schedule phase's settings included.

``spaces_policy`` refuses any other config with a ``ConfigError`` naming the field (refused rather than silently
changed, so the run is the config the visitor saw); every size over its cap is named in that one error, not only the
first. ``spaces_choices`` makes the policy's choice checks (agents, critic, QA model, backends, launch) on the
editor's raw TOML, before the config's own checks: those would first ask for what a refused choice needs (an openai
critic's model and URL) and only then say that the choice is not allowed. ``spaces_capped`` gives a config that passes
(the Run tab's starting config on Spaces, the first visit's showcase run). ``spaces_runs_full`` says when the store
holds as many runs as a Space keeps (``MAX_SPACES_RUNS``). Nothing here keeps state between calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.config import RunConfig
from engine.config_checks import apply_settings
from engine.config_values import get_field
from engine.errors import ConfigError

DEMO_AGENTS = ("assets/demo/planner", "assets/demo/grounder")
# Spaces mode: (dotted field, largest value allowed).
SPACES_CAPS = (("data.train_limit", 16), ("data.eval_limit", 20), ("sample.k", 4), ("run.iterations", 1))
# The capped fields whose 0 means "all" (their help in engine.config says "(0: all)"): for them the refusal says that
# 0 is over the cap too. sample.k (>= 2) and run.iterations (>= 1) refuse 0 by their own field checks.
ZERO_MEANS_ALL = frozenset({"data.train_limit", "data.eval_limit"})
# The most runs a Space's store keeps: each visitor's run leaves its checkpoints on the Space's disk (about 31 MB for
# a run of the demo agents at the caps, as the Spaces visitor audit measured), and nothing removes them.
MAX_SPACES_RUNS = 20


def spaces_policy(config: RunConfig) -> RunConfig:
    """Spaces mode: only the demo agents (no adapters), the reference critic, no external QA model, in-process hf
    generation and training, every size within its cap;
    anything else raises ``ConfigError`` naming the field (refused rather than silently changed, so the run is the
    config the visitor saw; every size over its cap in one error). ``spaces_capped`` gives a config that passes."""
    _check_choices(lambda dotted: get_field(config, dotted))
    over = [(dotted, cap) for dotted, cap in SPACES_CAPS if _over_cap(get_field(config, dotted), cap)]
    if over:
        (field, cap), rest = over[0], over[1:]
        also = "; also " + "; ".join(f"{dotted}: {_cap_text(dotted, cap)}" for dotted, cap in rest) if rest else ""
        raise ConfigError(field, _cap_text(field, cap) + also)
    for index, phase in enumerate(config.schedule.phases, start=1):  # a phase's settings must not lift a cap
        where = f"schedule.phases[{index}].set"
        phase_config = apply_settings(config, phase.set, where)
        phase_config.schedule.phases = []
        try:
            spaces_policy(phase_config)
        except ConfigError as exc:
            raise ConfigError(where, f"{exc.field}: {exc.message}") from None
    return config


def spaces_choices(data: dict[str, Any]) -> None:
    """The policy's choice checks (agents, critic, QA model, backends, launch) on a parsed TOML table, before it is
    checked as a config: a visitor who sets ``critic.backend = "openai"`` is told that only the reference critic runs
    here, not first asked for the critic's model and URL. Only the fields the table sets are checked (a default is
    ``spaces_policy``'s, once the config is built); raises ``ConfigError`` naming the field."""

    def value_of(dotted: str) -> Any:
        section, name = dotted.split(".")
        table = data.get(section)
        return table.get(name) if isinstance(table, dict) else None  # TOML has no null: None is "not set"

    _check_choices(value_of)


def _check_choices(given: Callable[[str], Any]) -> None:
    """What ``spaces_policy`` allows beside the sizes, reading each field through ``given`` (a config's, or a raw
    table's, which gives None for a field it does not set: that field is not checked)."""
    for role, path in zip(("planner", "grounder"), DEMO_AGENTS):
        agent_path = given(f"{role}.path")
        if agent_path is not None and str(agent_path).rstrip("/") != path:
            raise ConfigError(f"{role}.path", f"only the demo agent {path} is allowed on Spaces")
        if given(f"{role}.adapter"):
            raise ConfigError(f"{role}.adapter", "no adapters on Spaces: only the demo agents run there")
    if given("critic.backend") not in (None, "reference"):
        raise ConfigError("critic.backend", "only the reference critic is allowed on Spaces")
    if given("tools.qa_base_url"):  # a visitor must not make the Space call arbitrary URLs
        raise ConfigError("tools.qa_base_url", "no external QA model on Spaces (leave it empty)")
    for dotted, allowed in (("sample.backend", "hf"), ("ground.backend", "hf"), ("launch.mode", "inprocess")):
        if given(dotted) not in (None, allowed):
            raise ConfigError(dotted, f"only {allowed} on Spaces")


def _over_cap(value: int, cap: int) -> bool:
    return value == 0 or value > cap  # 0 is "all" for the limits; the other capped fields refuse it themselves


def _cap_text(dotted: str, cap: int) -> str:
    """``"at most 4 on Spaces"``, saying that 0 is refused too only where 0 means all (``ZERO_MEANS_ALL``)."""
    zero = " (0, meaning all, is not allowed either)" if dotted in ZERO_MEANS_ALL else ""
    return f"at most {cap} on Spaces{zero}"


def spaces_runs_full(runs: int) -> str | None:
    """Why a Space refuses a new run when its store already holds ``runs`` runs (``MAX_SPACES_RUNS`` or more); None
    while there is room."""
    if runs < MAX_SPACES_RUNS:
        return None
    return (f"this Space already keeps {runs} runs, the most it holds ({MAX_SPACES_RUNS}): browse the runs in the run "
            "picker, or run MOAT Studio on your own machine to make more.")


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
        if _over_cap(getattr(getattr(config, section), name), cap):
            setattr(getattr(config, section), name, cap)
    return config
