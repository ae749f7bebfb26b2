"""Curricula: a run's iterations grouped into phases (``[[schedule.phases]]``), each running some of the stages with
settings of its own.

Without phases every iteration t >= 1 is the MOAT iteration (all of ``ITERATION_STAGES`` under the run's config).
With phases, iterations are dealt to them in order: phase 1 takes iterations 1..n1, phase 2 the next n2, and so on;
iterations past the last phase repeat it (so ``--set run.iterations=...`` extends a curriculum by its last phase,
the steady state). Within a phase:

* ``stages`` lists what each iteration runs; the loop still runs them in its own order, and every other stage is
  recorded ``skipped`` with the phase named as the reason (a skipped training stage carries its role's checkpoint
  forward, as the ablations' do);
* ``set`` overrides a few sections for those iterations only (``SETTABLE``: what stages read, never the models, the
  data or the evaluation, so checkpoints and metrics stay comparable across phases).

Phases are not a second state machine: a stage's state lives in the store per (iteration, stage) like any other,
so a curriculum resumes after a kill exactly where it stopped, within a phase or between two.

``check_schedule`` raises ``ConfigError`` naming the phase's field (``schedule.phases[2].stages``) for an empty or
repeated name, a ``set`` outside ``SETTABLE`` or with a bad value, and a stage whose input no stage of the phase
makes (e.g. ``pairs`` without ``score``).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

from engine.errors import ConfigError

if TYPE_CHECKING:  # engine.config imports this module's checks through engine.config_checks
    from engine.config import Phase, RunConfig

# What a phase may set: the sections stages read their knobs from, and two stage switches.
SETTABLE_SECTIONS = ("sample", "score", "pairs", "dpo", "grpo", "ground", "critic", "sft", "grpo_grounder")
SETTABLE_FIELDS = ("stages.planner_objective", "stages.grounder_objective", "stages.grounder_data")


def phase_of(config: RunConfig, iteration: int) -> tuple[int, Phase] | None:
    """``(index, phase)`` (1-based) that ``iteration`` belongs to; ``None`` without phases or for iteration 0."""
    phases = config.schedule.phases
    if not phases or iteration < 1:
        return None
    end = 0
    for index, phase in enumerate(phases, start=1):
        end += phase.iterations
        if iteration <= end:
            return index, phase
    return len(phases), phases[-1]


def iteration_config(config: RunConfig, iteration: int) -> RunConfig:
    """The config iteration ``iteration``'s stages run under: ``config`` with its phase's ``set`` applied (the same
    object when the phase sets nothing)."""
    found = phase_of(config, iteration)
    if found is None or not found[1].set:
        return config
    return _with_settings(config, found[1].set, f"schedule.phases[{found[0]}].set")


def skip_reason(config: RunConfig, iteration: int, stage: str) -> str | None:
    """Why the curriculum skips ``stage`` at ``iteration`` (None: its phase runs it, or there are no phases)."""
    found = phase_of(config, iteration)
    if found is None or stage in found[1].stages:
        return None
    _, phase = found
    return f"not in phase {phase.name!r} (it runs {', '.join(phase.stages)})"


def describe(config: RunConfig) -> list[str]:
    """One line per phase: ``"1-2 executor: sample, score, ground, ... (sft.epochs=2)"``."""
    lines, start = [], 1
    for phase in config.schedule.phases:
        end = start + phase.iterations - 1
        span = f"{start}" if end == start else f"{start}-{end}"
        settings = f" ({', '.join(phase.set)})" if phase.set else ""
        lines.append(f"{span} {phase.name}: {', '.join(phase.stages)}{settings}")
        start = end + 1
    return lines


def _needs(stage: str, config: RunConfig) -> list[str]:
    """The stages of the same iteration whose rows ``stage`` reads."""
    if stage == "score":
        return ["sample"]
    if stage == "pairs":
        return ["score"]
    if stage == "train_planner":  # GRPO makes its own rollouts; DPO trains on the iteration's pairs
        return [] if config.stages.planner_objective == "grpo" else ["pairs"]
    if stage == "ground":  # grounds the sampled plans, chosen by their scores (engine.ranking.select)
        return ["sample", "score"]
    if stage == "critique":
        return ["ground"]
    if stage == "train_grounder":  # GRPO rolls out on the grounded plans' prompts; SFT learns the verdicts
        critic = config.stages.grounder_objective == "sft" and config.stages.grounder_data == "critic"
        return ["ground", "critique"] if critic else ["ground"]
    return []


def check_schedule(config: RunConfig, source: str | None) -> None:
    names: set[str] = set()
    for index, phase in enumerate(config.schedule.phases, start=1):
        where = f"schedule.phases[{index}]"
        if not phase.name.strip():
            raise ConfigError(f"{where}.name", "required: the phase's name", source)
        if phase.name in names:
            raise ConfigError(f"{where}.name", f"{phase.name!r} names two phases", source)
        names.add(phase.name)
        if not phase.stages:
            raise ConfigError(f"{where}.stages", "name at least one stage", source)
        if len(set(phase.stages)) != len(phase.stages):
            raise ConfigError(f"{where}.stages", f"a stage is named twice: {phase.stages}", source)
        for item in phase.set:
            key = item.partition("=")[0].strip()
            if key.split(".", 1)[0] not in SETTABLE_SECTIONS and key not in SETTABLE_FIELDS:
                raise ConfigError(f"{where}.set", f"{key!r} cannot change per phase (a phase may set "
                                                  f"{', '.join(SETTABLE_SECTIONS)}, {', '.join(SETTABLE_FIELDS)})",
                                  source)
        phase_config = _with_settings(config, phase.set, f"{where}.set", source) if phase.set else config
        for stage in phase.stages:
            missing = [need for need in _needs(stage, phase_config) if need not in phase.stages]
            if missing:
                raise ConfigError(f"{where}.stages", f"{stage} reads the rows {' and '.join(missing)} writes in "
                                                     f"the same iteration: add {', '.join(missing)} to the phase",
                                  source)


def _with_settings(config: RunConfig, settings: list[str], where: str, source: str | None = None) -> RunConfig:
    """``config`` with ``settings`` applied, validated as a whole config; errors are reported at ``where``."""
    from engine.config import config_from_dict, config_to_dict, parse_overrides

    data = config_to_dict(config)
    data.pop("schedule")  # validated without its phases: checking them again would recurse
    try:
        for section, values in parse_overrides(settings).items():
            data.setdefault(section, {}).update(values)
        derived = config_from_dict(data, source)
    except ConfigError as exc:
        raise ConfigError(where, f"{exc.field}: {exc.message}", source) from None
    derived.schedule = copy.deepcopy(config.schedule)
    return derived
