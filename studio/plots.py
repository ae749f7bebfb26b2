"""Plotly building blocks shared by the Metrics tab's run and experiment views: one palette, integer iteration axes,
a line with optional error bars, a mean line with its shaded interval band. A percent axis shows whole percents on
its ticks and one decimal on hover (``PERCENT_AXIS``), as the tables do: a hover of "60%" beside a table's 60.4 read
as another number. A chart of a quantity that should fall ends its title with ``LOWER_IS_BETTER``.

Pure rendering: every function takes numbers already computed (by the engine) and returns or changes a figure.
"""

from __future__ import annotations

import textwrap
from collections.abc import Hashable, Iterable, Sequence

import plotly.graph_objects as go

PALETTE = ("#1F77B4", "#FF7F0E", "#2CA02C", "#D62728", "#9467BD", "#8C564B", "#E377C2", "#7F7F7F", "#BCBD22",
           "#17BECF")  # D3's category10
# Integer ticks on an iteration axis: one tick per iteration, never 0.5.
ITERATION_AXIS = dict(tickmode="linear", tick0=0, dtick=1, tickformat="d")
# A y axis of fractions shown as %: whole percents on the ticks, one decimal on hover (the tables' precision).
PERCENT_AXIS = dict(tickformat=".0%", hoverformat=".1%")
# The end of the title of a chart whose quantity should fall (the capability gap: PPL, log-PPL), beside accuracy
# charts where up is better: read the other way, a closing gap looked like a regression.
LOWER_IS_BETTER = " · lower is better"


def colours(keys: Iterable[Hashable]) -> dict[Hashable, str]:
    """One palette colour per key, in the order given (cycling after ten): the same key, the same colour, in every
    figure that uses this map."""
    return {key: PALETTE[i % len(PALETTE)] for i, key in enumerate(dict.fromkeys(keys))}


def rgba(colour: str, alpha: float) -> str:
    """``#RRGGBB`` -> ``rgba(r,g,b,alpha)`` (a band's fill)."""
    r, g, b = (int(colour[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def figure(title: str, x: str, y: str, iterations: bool = True, percent: bool = False) -> go.Figure:
    """An empty figure; ``iterations``: integer ticks on x; ``percent``: y holds fractions shown as %."""
    fig = go.Figure()
    fig.update_layout(title=title, xaxis_title=x, yaxis_title=y, height=320, margin=dict(l=40, r=10, t=40, b=40))
    if iterations:
        fig.update_xaxes(**ITERATION_AXIS)
    if percent:
        fig.update_yaxes(**PERCENT_AXIS)
    return fig


NOTE_WIDTH = 60  # characters per line of an empty chart's note: about what a half-width chart shows at 1400 px


def note_if_empty(fig: go.Figure, text: str) -> go.Figure:
    """A figure without data shows ``text`` instead of empty axes (never an empty chart with axes from -1 to 6),
    broken into lines of at most ``NOTE_WIDTH`` characters: plotly draws an annotation on one line, and a long note
    ran past both edges of a half-width chart."""
    if not any(len(trace.x if trace.x is not None else ()) for trace in fig.data):
        fig.update_xaxes(visible=False)
        fig.update_yaxes(visible=False)
        fig.layout.shapes, fig.layout.annotations = (), ()  # marks on the axes (iteration starts) go with them
        # Lines the caller broke stay broken; each is wrapped on its own, never inside a word such as "held-out".
        lines = [line for part in text.split("<br>")
                 for line in textwrap.wrap(part, NOTE_WIDTH, break_on_hyphens=False) or [""]]
        fig.add_annotation(text="<br>".join(lines), showarrow=False,
                           xref="paper", yref="paper", x=0.5, y=0.5,
                           font=dict(size=14, color="#666"))
    return fig


MARKER_LIMIT = 60  # points per series up to which each point gets a marker


def line(fig: go.Figure, x: Sequence, y: Sequence, name: str, colour: str | None = None, dashed: bool = False,
         lo: Sequence | None = None, hi: Sequence | None = None, yaxis: str | None = None) -> None:
    """A line with markers (up to ``MARKER_LIMIT`` points; a longer series, a training log of hundreds of steps, is
    drawn as a plain line: hundreds of markers per series hid the lines under them); ``lo``/``hi`` (same length as
    ``y``) draw asymmetric error bars; ``yaxis="y2"`` puts it on a second y axis (see ``second_axis``)."""
    x, y = list(x), list(y)
    error = None
    if lo is not None and hi is not None:
        error = dict(type="data", symmetric=False, array=[h - v for h, v in zip(hi, y)],
                     arrayminus=[v - lo_ for v, lo_ in zip(y, lo)], thickness=1, width=4)
    fig.add_scatter(x=x, y=y, mode="lines+markers" if len(y) <= MARKER_LIMIT else "lines", name=name, error_y=error,
                    line=dict(dash="dash" if dashed else "solid", color=colour), **({"yaxis": yaxis} if yaxis else {}))


def second_axis(fig: go.Figure, title: str, percent: bool = False) -> go.Figure:
    """A right-hand y axis (``yaxis2``) for a quantity on another scale than the left one (a 0-1 rate beside a
    count): traces drawn with ``line(..., yaxis="y2")`` use it; ``percent``: 0-100% of a fraction. The legend moves
    past the axis' tick labels."""
    fig.update_layout(yaxis2=dict(title=title, overlaying="y", side="right", showgrid=False, rangemode="tozero",
                                  **(PERCENT_AXIS if percent else {})),
                      legend=dict(x=1.12, xanchor="left"))
    return fig


def band_and_mean(fig: go.Figure, x: Sequence, mean: Sequence, lo: Sequence, hi: Sequence, name: str, colour: str,
                  legend: bool = True, band: bool = True, hover: Sequence[str] | None = None, **where: int) -> None:
    """A shaded interval polygon (``fill="toself"``, named ``"<name> 95% CI"``) under the mean line (``name``);
    ``band=False``: the line alone (one seed has no interval, and a zero-width polygon would claim one); ``hover``:
    one text per point, shown under the name and iteration in place of plotly's bare ``(x, y)``; ``where`` (row=,
    col=) places both in a subplot."""
    x = list(x)
    if band:
        fig.add_trace(go.Scatter(x=x + x[::-1], y=list(hi) + list(lo)[::-1], fill="toself",
                                 fillcolor=rgba(colour, 0.18), line=dict(width=0, color=colour), hoverinfo="skip",
                                 showlegend=False, legendgroup=name, name=f"{name} 95% CI", mode="lines"), **where)
    text = dict(customdata=list(hover), hovertemplate="<b>%{fullData.name}</b> · iteration %{x}<br>"
                "%{customdata}<extra></extra>") if hover is not None else {}
    fig.add_trace(go.Scatter(x=x, y=list(mean), mode="lines+markers", name=name, legendgroup=name,
                             showlegend=legend, line=dict(color=colour), **text), **where)
