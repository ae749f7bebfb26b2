"""Why an export has no rows: ``empty_reason(store, run_id, iteration, what, studio=False) -> str | None``.

``what`` is ``pairs``, ``sft`` or ``rollouts``. None means the stage that makes those rows is done, so an empty export
is the data (every pair filtered out, or excluded or tied by curation) and may be written. Otherwise a sentence for
the user: iteration 0 samples and grounds no plans, an iteration that trained neither agent by GRPO has no rollouts,
one that trained its grounder by GRPO has no SFT records (though its ground stage wrote groundings), and one whose
pairs / ground / GRPO training stage is not done has none yet (saying how to run it: the CLI command, or with
``studio`` the Run tab's button). ``python -m engine export`` refuses with it (exit 2, nothing written); the studio's
Export tab shows it instead of a download of an empty file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.store import Store

# The table each export reads and the stage that fills it: rows in the table mean the data exists, so an empty export
# is curation's doing (every pair excluded or tied); no rows and the stage done means it kept nothing. Either way the
# empty file is the honest answer. Without them, ``empty_reason`` says why the iteration has no such rows.
SOURCES = {"pairs": ("pairs", "pairs"), "sft": ("groundings", "ground")}
NOUNS = {"pairs": "pairs", "sft": "SFT records", "rollouts": "GRPO rollouts"}


def _stage_state(store: Store, run_id: str, iteration: int, stage: str) -> tuple[str, str]:
    """``(status, note)`` of one stage's record; ``("not run", "")`` when it has none."""
    state = store.stage_status(run_id, iteration).get(stage)
    if state is None:
        return "not run", ""
    return state["status"], str((state.get("counts") or {}).get("note") or "")


def _not_done(run_id: str, iteration: int, stage: str, status: str, note: str, studio: bool) -> str:
    if status == "skipped":
        return f"its {stage} stage was skipped ({note or 'no reason recorded'})"
    says = {"not run": "has not run", "pending": "has not run", "running": "is still running"}.get(status, status)
    if studio:  # a Space's visitor has no shell: the button that runs it
        return f"its {stage} stage {says} (the Run tab's *Next stage* runs it)"
    return f"its {stage} stage {says} (`python -m engine step {stage} --run {run_id} --iteration {iteration}`)"


def _objectives(store: Store, run_id: str, iteration: int) -> dict[str, str] | None:
    """``{"train_planner": objective, "train_grounder": objective}`` under the run's config with the iteration's
    curriculum phase applied; None when the stored config no longer loads (then only stage records decide)."""
    from engine.errors import ConfigError
    from engine.schedule import iteration_config
    from engine.stored_config import stored_config

    run = store.get_run(run_id) or {}
    try:
        config = iteration_config(stored_config(run.get("config") or {}), iteration)
    except ConfigError:
        return None
    return {"train_planner": config.stages.planner_objective, "train_grounder": config.stages.grounder_objective}


def _grounder_by_grpo(store: Store, run_id: str, iteration: int) -> bool:
    return (_objectives(store, run_id, iteration) or {}).get("train_grounder") == "grpo"


def empty_reason(store: Store, run_id: str, iteration: int, what: str, studio: bool = False) -> str | None:
    """Why ``iteration`` of ``run_id`` cannot hold ``what`` rows, for an export that found none; None when the
    stage that makes them is done, so the empty export is the data (see ``SOURCES``)."""
    noun = NOUNS[what]
    if what == "sft" and iteration >= 1 and _grounder_by_grpo(store, run_id, iteration):
        # Its ground stage wrote groundings, but no critic judged them: the grounder's data are its GRPO rollouts
        # (the studio's Export tab offers no rollouts, and a Space's visitor has no shell: no hint there).
        hint = "" if studio else " (try --what rollouts)"
        return (f"iteration {iteration} trained its grounder by GRPO (stages.grounder_objective), so it has no "
                f"{noun}: its grounder's training data are its GRPO rollouts{hint}")
    if what in SOURCES and store.count(SOURCES[what][0], run_id, iteration):
        return None
    if iteration == 0:  # stages_of(0): the warm start (SFT on gold data) and the baseline evaluation, nothing else
        does = {"pairs": "samples no plans", "sft": "grounds no plans", "rollouts": "trains nothing by GRPO"}[what]
        return f"iteration 0 {does} (it only warm-starts and evaluates the agents), so it has no {noun}"
    if what in SOURCES:
        stage = SOURCES[what][1]
        status, note = _stage_state(store, run_id, iteration, stage)
        if status == "done":
            return None
        return f"iteration {iteration} has no {noun}: {_not_done(run_id, iteration, stage, status, note, studio)}"
    objectives = _objectives(store, run_id, iteration)
    stages = [s for s in ("train_planner", "train_grounder") if objectives is None or objectives[s] == "grpo"]
    if not stages:
        assert objectives is not None
        return (f"iteration {iteration} trained its planner by {objectives['train_planner'].upper()} and its grounder "
                f"by {objectives['train_grounder'].upper()} (stages.planner_objective, stages.grounder_objective), "
                f"so it has no {noun}")
    states = {stage: _stage_state(store, run_id, iteration, stage) for stage in stages}
    if any(status == "done" for status, _ in states.values()):
        return None
    return f"iteration {iteration} has no {noun}: " + "; ".join(
        _not_done(run_id, iteration, stage, status, note, studio) for stage, (status, note) in states.items())
