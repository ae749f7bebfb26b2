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

PANEL_TITLE_LINE = 20  # px: one line of a panel's title (12 px type) and its gap
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
    palette = colours(sorted(set(logs["iteration"])))
    panels = []  # per role: its lines as (iteration, what trained it, rows), in the order they are drawn
    for role, df in roles:
        panels.append([(it, "warm-start SFT" if stage.startswith("warm_start") else
                        objectives(store, run_id, int(it))[role], part)
                       for (it, stage), part in df.groupby(["iteration", "stage"])])
    # Each panel titled by its role and objectives, its y axis just "loss": the rotated "planner loss (DPO)" was
    # taller than a phone's panel and ran into the chart's title.
    titles = [f"{role} loss ({' / '.join(sorted({trained for _, trained, _ in lines}))})"
              for (role, _), lines in zip(roles, panels)]
    fig = make_subplots(rows=len(roles), cols=1, vertical_spacing=0.18, subplot_titles=titles)
    fig.update_annotations(font=dict(size=12), x=0, xanchor="left")
    for row, ((role, _), lines) in enumerate(zip(roles, panels), start=1):
        for it, trained, part in lines:
            fig.add_scatter(x=part["step"], y=part["loss"], mode="lines+markers", name=f"{role} · it {it} · {trained}",
                            line=dict(color=palette[it]), marker=dict(size=4), legendgroup=role, row=row, col=1)
        fig.update_yaxes(title_text="loss", row=row, col=1)
        fig.update_xaxes(title_text="step" if row == len(roles) else None, row=row, col=1)
    # The legend in rows under the plot: a column of "planner · it 2 · GRPO" beside it took half a phone's chart.
    fig.update_layout(height=360 if len(roles) == 1 else 500, margin=dict(l=40, r=10, b=40),
                      legend=dict(groupclick="toggleitem", **LEGEND_BELOW))
    titled(fig, "TRL loss by role")
    # The top panel's title stands on the plot's top edge where the chart's own title stands: the chart's title is
    # lifted above it by a line.
    fig.update_layout(title_pad_b=fig.layout.title.pad.b + PANEL_TITLE_LINE,
                      margin_t=fig.layout.margin.t + PANEL_TITLE_LINE)
    return fig
