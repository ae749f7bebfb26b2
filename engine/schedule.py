"""Curricula: a run's iterations grouped into phases (``[[schedule.phases]]``), each running some of the stages with
settings of its own.

Without phases every iteration t >= 1 is the MOAT iteration (all of ``ITERATION_STAGES`` under the run's config).
With phases, iterations are dealt to them in order: phase 1 takes iterations 1..n1, phase 2 the next n2, and so on;
iterations past the last phase repeat it (so ``--set run.iterations=...`` extends a curriculum by its last phase,
the steady state). Within a phase:

* ``stages`` lists what each iteration runs; the loop still runs them in its own order, and every other stage is
  recorded ``skipped`` with the phase named as the reason (a skipped training stage carries its role's checkpoint
  forward, as the ablations' do);
* ``set`` overrides a few sections for those iterations only (``engine.config_checks.SETTABLE_SECTIONS``: what
  stages read, never the models, the data or the evaluation, so checkpoints and metrics stay comparable across
  phases).

Phases are not a second state machine: a stage's state lives in the store per (iteration, stage) like any other,
so a curriculum resumes after a kill exactly where it stopped, within a phase or between two.

``engine.config_checks.check_schedule`` (run with every config check) raises ``ConfigError`` naming the phase's
field (``schedule.phases[2].stages``) for an empty or repeated name, a ``set`` outside what a phase may set or with
a bad value (under ``agents.topology = shared``, one that changes the run's LoRA settings: the next phase loads this
one's checkpoints), and a stage whose input no stage of the phase makes (e.g. ``pairs`` without ``score``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.config_checks import apply_settings

if TYPE_CHECKING:
    from engine.config import Phase, RunConfig


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
    return apply_settings(config, found[1].set, f"schedule.phases[{found[0]}].set")


def skip_reason(config: RunConfig, iteration: int, stage: str) -> str | None:
    """Why the curriculum skips ``stage`` at ``iteration`` (None: its phase runs it, or there are no phases)."""
    found = phase_of(config, iteration)
    if found is None or stage in found[1].stages:
        return None
    _, phase = found
    return f"not in phase {phase.name!r} (it runs {', '.join(phase.stages)})"


def critique_skip_reason(config: RunConfig) -> str | None:
    """Why an iteration running under ``config`` (its phase's settings applied) has no critique stage whatever its
    phase runs: stage 2 off, or a grounder that learns from something other than the critic's verdicts. None: it
    critiques. ``engine.loop.is_skipped`` records the same reasons."""
    if not config.stages.stage2:
        return "stage 2 disabled (stages.stage2 = false)"
    if config.stages.grounder_objective == "grpo":
        return "the grounder learns by GRPO (stages.grounder_objective = grpo): its rewards, not a critic, judge it"
    if config.stages.grounder_data != "critic":
        what = {"raw": "the grounder's own groundings, unchecked",
                "executed": "the groundings that executed to the gold answer"}[config.stages.grounder_data]
        return f"no critic (stages.grounder_data = {config.stages.grounder_data}): SFT on {what}"
    return None


def critiques(config: RunConfig) -> bool:
    """Whether any iteration of the run has a critique stage (its phase runs it, and under the phase's settings
    ``critique_skip_reason`` finds none): whether a run needs its critic at all, e.g. before probing a server."""
    return any(skip_reason(config, t, "critique") is None and critique_skip_reason(iteration_config(config, t)) is None
               for t in range(1, config.run.iterations + 1))


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


