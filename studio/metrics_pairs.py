"""The Metrics tab's pairs chart: per iteration, the preference pairs the planner trained on and the tie rate.

* ``pair_counts(store, run_id) -> DataFrame``: one row per iteration with pairs: ``curated`` (the effective pairs
  neither excluded nor tied, as curated now), ``trained`` (the rows DPO trained on: the ``rows`` count the
  iteration's ``train_planner`` recorded when it is done and the iteration's planner learns by DPO; NA otherwise),
  ``tie_rate`` (a fraction of the effective pairs, as curated now) and ``excluded``.
* ``draw_pairs(fig, counts, tag, dashed, dpo) -> int``: the lines, and the top of the count axis they need. For a run
  whose planner learns by DPO: "pairs in training", the trained counts of the iterations trained, and "pairs as
  curated (untrained)", the curated count of the others (an iteration not trained yet, or one a curriculum trained
  by GRPO). A run that never trains on the pairs (GRPO) draws the curated count as "pairs". The tie rate goes on
  the right-hand axis (``yaxis="y2"``).

Why the trained count: the point stood for the pairs as curated now, so a tie or an exclude made after an
iteration's training moved that iteration's "pairs in training" point, though the checkpoint was trained on the
pairs as they were. ``train_planner`` records what it read (``engine.stages.train.run_planner``: ``rows``); a redo
of the stage records its own. Reads ``pairs``/``overrides`` (``Store.effective_pairs``) and ``stages``; no Gradio.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from engine.store import Store
from studio.plots import line
from studio.stage_text import objectives

COLUMNS = ["iteration", "curated", "trained", "tie_rate", "excluded"]


def _trained_rows(store: Store, run_id: str, iteration: int) -> int | None:
    """The rows the iteration's DPO training read, as its ``train_planner`` recorded them; None while it has not
    finished (pending, running, failed, stopped), when it was skipped, or when the iteration's planner learned by
    GRPO (its ``rows`` are prompts, not pairs)."""
    if objectives(store, run_id, iteration)["planner"] != "DPO":
        return None
    stage = store.stage_status(run_id, iteration).get("train_planner") or {}
    rows = (stage.get("counts") or {}).get("rows")
    if stage.get("status") != "done" or isinstance(rows, bool) or not isinstance(rows, int):
        return None
    return rows


def pair_counts(store: Store, run_id: str) -> pd.DataFrame:
    """Per iteration with pairs: the curated and trained counts, the tie rate and the excluded count (see the
    module docstring)."""
    rows = []
    for it in store.iterations(run_id):
        eff = store.effective_pairs(run_id, it)
        if len(eff):
            rows.append({"iteration": it, "curated": int((~eff["excluded"] & ~eff["tie"]).sum()),
                         "trained": _trained_rows(store, run_id, it), "tie_rate": float(eff["tie"].mean()),
                         "excluded": int(eff["excluded"].sum())})
    df = pd.DataFrame(rows, columns=COLUMNS)
    df["trained"] = df["trained"].astype("Int64")  # NA for an iteration not trained on its pairs
    return df


def draw_pairs(fig: go.Figure, counts: pd.DataFrame, tag: str = "", dashed: bool = False, dpo: bool = True) -> int:
    """The pair lines and the tie rate of one run (``tag`` "A " / "B ", run B ``dashed``); returns the largest count
    drawn (the count axis' top)."""
    trained = counts["trained"].notna()
    if dpo:
        done, rest = counts[trained], counts[~trained]
        if len(done):
            line(fig, done["iteration"], [int(n) for n in done["trained"]], f"{tag}pairs in training", dashed=dashed)
        if len(rest):  # labelled apart: the count can still move with the curation, and nothing trained on it yet
            line(fig, rest["iteration"], rest["curated"], f"{tag}pairs as curated (untrained)", dashed=dashed)
        shown = [int(n) for n in done["trained"]] + [int(n) for n in rest["curated"]]
    else:
        line(fig, counts["iteration"], counts["curated"], f"{tag}pairs", dashed=dashed)
        shown = [int(n) for n in counts["curated"]]
    line(fig, counts["iteration"], counts["tie_rate"], f"{tag}tie rate (right axis)", dashed=dashed, yaxis="y2")
    return max(shown, default=0)
