"""``loss_figure(store, run_id, logs=None) -> go.Figure``: the Run tab's TRL loss chart, one panel per role.

The planner above, the grounder below (a GRPO loss around 0 and an SFT loss are different quantities, never one
curve); one line per iteration and training stage, named by what trained it ("it 2 · GRPO", "it 0 · warm-start SFT"
from ``studio.stage_text.objectives``), one colour per iteration in both panels; titled and with its legend in rows
under the plot as the Metrics charts are (``studio.plots``: they fit a phone). A run with no logged loss gets an
empty chart that says so.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from engine.store import Store
from studio.plots import LEGEND_BELOW, colours, note_if_empty, titled
from studio.stage_text import objectives

ROLES = (("planner", ("warm_start_planner", "train_planner")), ("grounder", ("warm_start_grounder", "train_grounder")))


def loss_figure(store: Store, run_id: str | None, logs: pd.DataFrame | None = None) -> go.Figure:
    """Training loss per logged step, one panel per role (planner above, grounder below: a GRPO loss around 0 and
    an SFT loss are different quantities, never one curve), one line per iteration named by what trained it
    ("it 2 · GRPO", "it 0 · warm-start SFT"), one colour per iteration in both panels. ``logs``: the run's
    ``train_log_rows`` when the caller has read them already."""
    if logs is None:
        logs = store.train_log_rows(run_id) if run_id else None
    logs = logs[logs["loss"].notna()] if logs is not None else None
    roles = [(role, logs[logs["stage"].isin(stages)]) for role, stages in ROLES] if logs is not None else []
    roles = [(role, df) for role, df in roles if len(df)]
    if not roles:
        fig = go.Figure()
        fig.update_layout(xaxis_title="step", yaxis_title="loss", height=320, margin=dict(l=40, r=10, b=40))
        titled(fig, "TRL loss")
        # In short lines: one line was wider than a phone's chart (cut off at both ends at 390 px).
        return note_if_empty(fig, "No training logged yet:<br>the loss appears here<br>while a training stage runs")
    fig = make_subplots(rows=len(roles), cols=1, vertical_spacing=0.16)
    palette = colours(sorted(set(logs["iteration"])))
    for row, (role, df) in enumerate(roles, start=1):
        names = set()
        for (it, stage), part in df.groupby(["iteration", "stage"]):
            trained = ("warm-start SFT" if stage.startswith("warm_start") else
                       objectives(store, run_id, int(it))[role])
            names.add(trained)
            fig.add_scatter(x=part["step"], y=part["loss"], mode="lines+markers", name=f"{role} · it {it} · {trained}",
                            line=dict(color=palette[it]), marker=dict(size=4), legendgroup=role, row=row, col=1)
        fig.update_yaxes(title_text=f"{role} loss ({' / '.join(sorted(names))})", row=row, col=1)
        fig.update_xaxes(title_text="step" if row == len(roles) else None, row=row, col=1)
    # The legend in rows under the plot: a column of "planner · it 2 · GRPO" beside it took half a phone's chart.
    fig.update_layout(height=360 if len(roles) == 1 else 500, margin=dict(l=40, r=10, b=40),
                      legend=dict(groupclick="toggleitem", **LEGEND_BELOW))
    return titled(fig, "TRL loss by role")
