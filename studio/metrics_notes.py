"""What an empty chart of the Metrics tab's run view says when a run is picked: which stage writes it, or why it
never will. Reads the store's stage records; no Gradio, no plotting.

``empty_notes(store, runs, planner, grounder) -> dict[chart, str]``: one note per chart of ``EMPTY_BY_STAGE`` (the
keys of ``studio.tab_metrics.FIGURES``), for the picked runs (``runs``: run A, and B when drawn) trained by the
objectives shown (``planner``: e.g. ``["DPO"]``, ``grounder``: ``["SFT"]``). By default "Nothing in this run yet:
the <stage> writes ..." (a run still in its first stages: never "pick a run" beside the picked run). A run whose
planner is not trained by DPO says DPO rewards do not apply, not "yet". A chart whose stage every run skipped at
every iteration it recorded past 0 (a variant without it: no_stage1, no_stage2, no_critic) says so, with the
stage's skip reason (``SKIPPABLE``); a run that has not reached the stage yet, or ran it once, may still fill it.
The caller shows a note only on a chart without data (``studio.plots.note_if_empty``).
"""

from __future__ import annotations

from engine.store import Store
from studio.stage_text import skip_note

# What writes each chart's data, for the note an empty chart of a picked run shows ({planner} / {grounder}: the
# runs' objectives, e.g. "DPO" or "GRPO").
EMPTY_BY_STAGE = {
    "accuracy": "evaluate stage writes accuracy", "gap_ppl": "evaluate stage writes the gap",
    "gap_logppl": "evaluate stage writes the gap", "dpo_rewards": "planner's {planner} stage logs these",
    "dpo_loss": "planner's {planner} stage logs its loss", "sft_loss": "grounder's {grounder} stage logs its loss",
    "pairs": "pairs stage writes pairs", "critic": "critique stage writes verdicts",
}

# The stage each chart reads, for a variant that skips it: (what the chart would show, its charts).
SKIPPABLE = {"pairs": ("pairs", ("pairs",)), "train_planner": ("planner training", ("dpo_loss", "dpo_rewards")),
             "train_grounder": ("grounder training", ("sft_loss",)), "critique": ("verdicts", ("critic",))}


def empty_notes(store: Store, runs: list[str], planner: list[str], grounder: list[str]) -> dict[str, str]:
    """The note of each chart, were it empty (see the module docstring)."""
    names = {"planner": " / ".join(planner), "grounder": " / ".join(grounder)}
    notes = {name: f"Nothing in this run yet: the {what.format(**names)}" for name, what in EMPTY_BY_STAGE.items()}
    if "DPO" not in planner:  # a GRPO run never logs DPO's rewards: say so, not "yet"
        notes["dpo_rewards"] = (f"This run trains its planner by {names['planner']} (stages.planner_objective), not "
                                "DPO: DPO rewards do not apply, and its trainer has logged no rewards yet")
    # each run's stage records past iteration 0, read once for every chart below
    records = {run_id: [store.stage_status(run_id, it) for it in store.iterations(run_id) if it > 0]
               for run_id in runs}
    for stage, (what, charts) in SKIPPABLE.items():
        reason = _skipped_everywhere(records, stage)
        if reason is not None:
            text = (f"No {what} in {'these runs' if len(runs) > 1 else 'this run'}. Its {stage} stage was skipped"
                    + (f": {reason}" if reason else ""))
            notes.update(dict.fromkeys(charts, text))
    return notes


def _skipped_everywhere(records: dict[str, list[dict[str, dict]]], stage: str) -> str | None:
    """``stage``'s skip reason when every run in ``records`` (run -> its iterations' ``stage_status``, past iteration
    0) recorded it and skipped it every time (a variant without it), else None: a run that has not reached it yet,
    or ran it once, may still fill the chart."""
    reasons = []
    for iterations in records.values():
        mine = [skip_note(states[stage]) for states in iterations if stage in states]
        if not mine or any(r is None for r in mine):
            return None
        reasons += mine
    return reasons[0] if reasons else None
