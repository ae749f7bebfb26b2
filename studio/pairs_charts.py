"""The Pairs tab's charts and its curation table, read from the store (no Gradio): the effective pairs' margin
histogram (``margin_figure``, its axes titled, its bins computed here so its count axis has whole-number ticks
only: ``studio.plots.count_axis``), the chosen-vs-rejected length bias (``length_figure``: the mean
difference titled, what it measures in a subtitle, the legend under the plot, as ``studio.plots`` lays out a chart
for a phone); either says "No pairs in iteration N" in words when the iteration has none. Per iteration, what the
curators did to the pairs and what the planner's training made of them (``curation_markdown``; an iteration whose
planner learns by GRPO says its pairs trained nothing, rather than "not trained" yet).
"""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

from engine.curation_summary import pair_curation_summary
from engine.store import Store
from studio.plots import LEGEND_BELOW, count_axis, note_if_empty, titled
from studio.stage_text import objectives


def _pair_stats(store: Store, run_id: str, iteration: int) -> pd.DataFrame:
    return store.pair_stats(run_id, int(iteration))  # read from the materialised pairs (engine.pair_view)


def margin_figure(store: Store, run_id: str | None, iteration: int | None,
                  stats: pd.DataFrame | None = None) -> go.Figure:
    """Histogram of the effective pairs' margins (x: the margin in log-PPL, nats per gold-action token; y: how many
    pairs); ``stats`` (``_pair_stats``) when the caller already has them. Without pairs it says so in words
    (``studio.plots.note_if_empty``), not as bare axes."""
    fig = go.Figure()
    if run_id and iteration is not None:
        margins = (_pair_stats(store, run_id, iteration) if stats is None else stats)["margin"].dropna()
        fig.add_histogram(x=margins, name="pairs")
        if len(margins):
            # Bins fixed here rather than by plotly, so the tallest bar is known and the count axis steps by whole
            # pairs (a few pairs gave ticks of 0.5 pair); "d" ticks alone printed "0, 0, 1, 1".
            values = [float(m) for m in margins]
            start, end, size = margin_bins(values)
            fig.update_traces(xbins=dict(start=start, end=end, size=size))
            fig.update_layout(yaxis=count_axis(tallest_bin(values, start, size)))
    fig.update_layout(title="Margin (rejected − chosen log-PPL)", height=300, margin=dict(l=40, r=10, t=40, b=40),
                      xaxis_title="margin (log-PPL, nats per token)", yaxis_title="pairs")
    return note_if_empty(fig, _no_pairs(run_id, iteration))


MARGIN_BINS = 30  # about this many bars across the margin histogram (a 1-2-5 bin size: up to 32)


def margin_bins(margins: list[float]) -> tuple[float, float, float]:
    """``(start, end, size)`` of the histogram's bins over ``margins`` (not empty): a 1-2-5 size that covers them in
    about ``MARGIN_BINS`` bins, the start a multiple of it at or below the least margin, the end half a bin past the
    greatest (plotly's bins are left-closed and run to the first edge at or past the end: one ending on the greatest
    margin, as float rounding may make it, left that margin out); margins all equal get one bin of 0.1."""
    low, high = min(margins), max(margins)
    size = _nice_size((high - low) / MARGIN_BINS) if high > low else 0.1
    start = math.floor(low / size) * size
    if start > low:  # float rounding put the multiple past the least margin, which plotly would then leave out
        start -= size
    return start, high + size / 2, size


def _nice_size(raw: float) -> float:
    """The smallest of 1, 2 or 5 times a power of ten that is at least ``raw`` (> 0)."""
    power = 10.0 ** math.floor(math.log10(raw))
    return next(lead * power for lead in (1, 2, 5, 10) if lead * power >= raw)


def tallest_bin(margins: list[float], start: float, size: float) -> int:
    """How many margins the fullest bin holds, bins left-closed as plotly's are (``[start + i·size, start +
    (i+1)·size)``). Margins on an edge that plotly's float arithmetic puts in the next bin make plotly's tallest bar
    differ from this count: that may change the count axis's step, never make its ticks fractional."""
    counts: dict[int, int] = {}
    for margin in margins:
        index = math.floor((margin - start) / size)
        counts[index] = counts.get(index, 0) + 1
    return max(counts.values())


def _no_pairs(run_id: str | None, iteration: int | None) -> str:
    """What an empty pairs chart says instead of its axes."""
    if not run_id or iteration is None:
        return "No pairs: pick a run and an iteration"
    if int(iteration) == 0:
        return "No pairs in iteration 0: it evaluates the starting agents; pairs start at iteration 1"
    return f"No pairs in iteration {int(iteration)} (yet)"


def length_figure(store: Store, run_id: str | None, iteration: int | None,
                  stats: pd.DataFrame | None = None) -> go.Figure:
    """Chosen vs rejected plan length (characters): points above the diagonal = the rule prefers longer plans."""
    fig = go.Figure()
    df = _pair_stats(store, run_id, iteration) if stats is None and run_id and iteration is not None else stats
    if df is not None and len(df):  # no pairs: the note below, not a diagonal over "+0.0 chars on average"
        fig.add_scatter(x=df["rejected_len"], y=df["chosen_len"], mode="markers", name="pairs")
        top = float(max(df["chosen_len"].max(), df["rejected_len"].max())) if len(df) else 1.0
        fig.add_scatter(x=[0, top], y=[0, top], mode="lines", name="equal", line=dict(dash="dot"))
        bias = (df["chosen_len"] - df["rejected_len"]).mean() if len(df) else 0.0
        # The number in the title, what it measures under it: one line of both was cut off on a phone's chart.
        titled(fig, f"Length bias: chosen {bias:+.1f} chars on average",
               "above the equal line: the chosen plan is longer")
    fig.update_layout(xaxis_title="rejected length", yaxis_title="chosen length", height=340,
                      margin=dict(l=40, r=10, b=40), legend=LEGEND_BELOW)
    return note_if_empty(fig, _no_pairs(run_id, iteration))


def _fmt(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:+.{digits}f}"


def curation_markdown(store: Store, run_id: str | None) -> str:
    """Per iteration: the curators' pair actions, which of them the planner's checkpoint was trained with, how many
    pairs a re-training would change (``pending``), the log-PPL margins before/after curation and TRL's DPO reward
    margins (``engine.curation_summary``)."""
    rows = pair_curation_summary(store, run_id) if run_id else []
    if not rows:
        return ""
    lines = ["**Curation per iteration** (DPO reward margin: TRL's implicit reward of chosen over rejected, first → "
             "last logged step, and the share of pairs it ranks right at the end)", "",
             "| iteration | pairs | reviewed | swaps | excludes | ties | chosen by hand | in the checkpoint | "
             "pairs changed since (re-train to use) | mean log-PPL margin: rule → trained | DPO reward margin |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        o, t, d = r["overrides"], r["trained_with"], r["dpo"]
        trained = "—" if t is None else f"{sum(t.values())} action(s)"
        if d is not None:
            dpo = f"{d['first_margin']:+.3f} → {d['last_margin']:+.3f} ({100 * d['last_accuracy']:.0f}% right)"
        elif objectives(store, run_id, int(r["iteration"]))["planner"] != "DPO":  # the pairs trained nothing
            dpo = "no DPO: the planner learns by " + objectives(store, run_id, int(r["iteration"]))["planner"]
        else:
            dpo = "not trained"
        lines.append(f"| {r['iteration']} | {r['pairs']} | {r['reviewed']} | {o['swap']} | {o['exclude']} | "
                     f"{o['tie']} | {o['choose']} | {trained} | {'—' if r['pending'] is None else r['pending']} | "
                     f"{_fmt(r['margin_auto'])} → {_fmt(r['margin_trained'])} | {dpo} |")
    return "\n".join(lines)
