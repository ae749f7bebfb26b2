"""Plotly building blocks shared by the Metrics tab's run and experiment views: one palette, integer iteration axes,
a line with optional error bars, a mean line with its shaded interval band; ``iteration_gaps`` breaks a logged-step
line between iterations (each iteration's training starts afresh: the rewards and the losses alike). A percent axis
shows whole percents on its ticks and one decimal on hover (``PERCENT_AXIS``), as the tables do: a hover of "60%"
beside a table's 60.4 read as another number; when plotly's ticks come closer than 1% (a tie rate of 1.1%) they get
one decimal, or two, so no two ticks read the same ("0%, 1%, 1%"). A count axis (``count_axis``) has whole-number
ticks only, never "0.5 pairs". A chart of a quantity that should fall ends its title with ``LOWER_IS_BETTER``.

Fit on a phone (a 390 px screen gives a chart about 320 px): ``titled`` breaks a title into lines of at most
``TITLE_WIDTH`` characters (at its " · " parts first, then between words) and puts what qualifies it (an interval,
the seeds) in a smaller grey subtitle, wrapped too; plotly draws each title line whole and clipped "... lower is
better" off the chart's edge. Legends lie in rows under the plot (``LEGEND_BELOW``), so the plot keeps the chart's
width (a legend at the right took half a phone's chart), and ``fit_legend`` makes a chart taller by the rows its
legend takes past two, up to ``LEGEND_MAX_ROWS``: a longer legend scrolls in a box of that many rows.

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
# A y axis of fractions shown as %: whole percents on the ticks, one decimal on hover (the tables' precision). Ticks
# closer than 1% apart (plotly's own spacing, on a small share or when zoomed) take the decimals they need: ".0%"
# printed a 1.1% tie rate's ticks as "0%, 1%, 1%". Bounds hold plotly's 1-2-5 steps with room for float error.
PERCENT_AXIS = dict(tickformat=".0%", hoverformat=".1%",
                    tickformatstops=[dict(dtickrange=[None, 0.00095], value=".2%"),
                                     dict(dtickrange=[0.00095, 0.0095], value=".1%")])
# The end of the title of a chart whose quantity should fall (the capability gap: PPL, log-PPL), beside accuracy
# charts where up is better: read the other way, a closing gap looked like a regression. On a line of its own when
# the title is long (``titled`` breaks at " · ").
LOWER_IS_BETTER = " · lower is better"
TITLE_SIZE = 14  # px: a line of TITLE_WIDTH characters fits a phone's 320 px chart
TITLE_WIDTH = 42  # characters per title line
SUBTITLE_WIDTH = 56  # characters per subtitle line (plotly draws it at 0.7 of the title's size)
MODEBAR = 28  # px at the chart's top left to plotly's tool icons, above the title
TITLE_LINE, SUBTITLE_LINE = 19, 16  # px a title line and a subtitle line take
# Legend entries in rows at the chart's foot, from its left edge, instead of a column that narrows the plot: placed
# on the whole chart ("container"), plotly reserves the legend's height under the x axis title (a legend placed below
# the plot area by a fraction of its height overlapped that title on a short plot).
LEGEND_BELOW = dict(orientation="h", xref="container", x=0.01, xanchor="left", yref="container", y=0.01,
                    yanchor="bottom", font=dict(size=11))
LEGEND_ROW = 20  # px a row of legend entries takes
LEGEND_ROWS = 2  # rows of entries HEIGHT leaves room for; a longer legend makes its chart taller (``fit_legend``)
# Rows a legend shows at most; past them it scrolls in its box (plotly's ``legend.maxheight``). Two runs' twelve
# split/domain lines took twelve rows on a phone (238 px under a 187 px plot, the chart 560 px tall).
LEGEND_MAX_ROWS = 5
PAIRED_NAME = 13  # characters of the longest legend name up to which a phone's row holds two entries
COUNT_TICKS = 6  # at most this many steps from 0 to the top of a count axis
HEIGHT = 360  # px of a chart: its legend takes rows under the plot, not a column beside it


def colours(keys: Iterable[Hashable]) -> dict[Hashable, str]:
    """One palette colour per key, in the order given (cycling after ten): the same key, the same colour, in every
    figure that uses this map."""
    return {key: PALETTE[i % len(PALETTE)] for i, key in enumerate(dict.fromkeys(keys))}


def rgba(colour: str, alpha: float) -> str:
    """``#RRGGBB`` -> ``rgba(r,g,b,alpha)`` (a band's fill)."""
    r, g, b = (int(colour[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def wrap(text: str, width: int) -> str:
    """``text`` in lines of at most ``width`` characters joined by ``<br>``: lines its caller broke stay broken; its
    " · " parts are kept whole and together while they fit (the separator dropped where a line ends), and a part
    longer than a line is broken between words (inside a word only when the word alone is longer than a line)."""
    lines: list[str] = []
    for given in text.split("<br>"):
        line = ""
        for part in given.split(" · "):
            if line and len(line) + 3 + len(part) <= width:
                line += " · " + part
                continue
            if line:
                lines.append(line)
            *full, line = textwrap.wrap(part, width, break_on_hyphens=False) or [""]
            lines += full
        lines.append(line)
    return "<br>".join(lines)


def titled(fig: go.Figure, title: str, subtitle: str = "") -> go.Figure:
    """``title`` (wrapped at ``TITLE_WIDTH``) and ``subtitle`` (smaller, grey, wrapped at ``SUBTITLE_WIDTH``) at the
    chart's top left, the top margin as tall as their lines."""
    text, sub = wrap(title, TITLE_WIDTH), wrap(subtitle, SUBTITLE_WIDTH) if subtitle else ""
    lines, sub_lines = text.count("<br>") + 1, sub.count("<br>") + 1 if sub else 0
    # Stood on the plot's top edge: plotly sets a bottom-anchored title's first line there and the next lines and the
    # subtitle under it, so the pad makes room for them. Under the row of plotly's tool icons (``MODEBAR``), which
    # drew over the title's end on a narrow chart.
    sub_height = SUBTITLE_LINE * sub_lines
    fig.update_layout(title=dict(text=text, x=0.02, xanchor="left", yref="paper", y=1, yanchor="bottom",
                                 pad=dict(b=8 + sub_height + (lines - 1) * TITLE_LINE), font=dict(size=TITLE_SIZE),
                                 subtitle=dict(text=sub, font=dict(color="#666"))),
                      margin=dict(t=MODEBAR + 12 + TITLE_LINE * lines + sub_height))
    return fig


def fit_legend(fig: go.Figure) -> go.Figure:
    """The chart taller by a ``LEGEND_ROW`` for each row of legend entries past ``LEGEND_ROWS``, up to
    ``LEGEND_MAX_ROWS`` rows: two runs' twelve split/domain lines left the plot itself a sliver. A legend of more rows
    is capped at that many (``legend.maxheight``) and scrolls, so the plot keeps an ordinary chart's height (about
    180 px on a phone) and the chart does not grow into a column of legend. Rows as a phone's chart (about 260 px of
    plot) lays them out: once they wrap, plotly gives every entry the widest one's width, and two of them fit a row
    only while the longest name has at most ``PAIRED_NAME`` characters."""
    names = [trace.name for trace in fig.data if trace.showlegend is not False and trace.name]
    per_row = 2 if names and max(map(len, names)) <= PAIRED_NAME else 1
    rows = -(-len(names) // per_row)
    shown = min(rows, LEGEND_MAX_ROWS)
    fig.update_layout(height=(fig.layout.height or HEIGHT) + LEGEND_ROW * max(0, shown - LEGEND_ROWS))
    if rows > LEGEND_MAX_ROWS:  # plotly's box adds its padding (10 px) to the rows: a cut-off row hints at the scroll
        fig.update_layout(legend_maxheight=LEGEND_ROW * LEGEND_MAX_ROWS + 10)
    return fig


def figure(title: str, x: str, y: str, iterations: bool = True, percent: bool = False,
           subtitle: str = "") -> go.Figure:
    """An empty figure titled by ``titled``, its legend under the plot; ``iterations``: integer ticks on x;
    ``percent``: y holds fractions shown as %."""
    fig = go.Figure()
    fig.update_layout(xaxis_title=x, yaxis_title=y, height=HEIGHT, margin=dict(l=40, r=10, b=40), legend=LEGEND_BELOW)
    titled(fig, title, subtitle)
    if iterations:
        fig.update_xaxes(**ITERATION_AXIS)
    if percent:
        fig.update_yaxes(**PERCENT_AXIS)
    return fig


def count_axis(top: float) -> dict:
    """The y axis settings of a count that reaches ``top``: from 0, whole numbers only, in 1-2-5 steps of at least 1
    (at most ``COUNT_TICKS`` of them). Plotly's own steps go down to 0.5 when the counts span a few units (pairs 91
    to 93 read "91.5"), and a "d" format alone then prints the same number twice."""
    step = 1
    while top / step > COUNT_TICKS:
        step = _next_step(step)
    return dict(tickmode="linear", tick0=0, dtick=step, tickformat="d", rangemode="tozero")


def _next_step(step: int) -> int:
    """1, 2, 5, 10, 20, 50, ...: the step after ``step``."""
    digits = len(str(step)) - 1
    lead = step // 10 ** digits
    return {1: 2, 2: 5, 5: 10}[lead] * 10 ** digits


NOTE_WIDTH = 40  # characters per line of an empty chart's note: about what a phone's chart shows (320 px)


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


def iteration_gaps(points: list[tuple]) -> list[tuple[float, float | None]]:
    """``(x, y)`` of ``(x, y, iteration)`` points in step order, with a ``(x, None)`` gap half a step before each
    iteration's first point after the first: plotly breaks a line at a missing y (``connectgaps`` is off)."""
    out: list[tuple[float, float | None]] = []
    for i, (x, y, it) in enumerate(points):
        if i and it != points[i - 1][2]:
            out.append((x - 0.5, None))
        out.append((x, y))
    return out


SHARE_RANGE = [-0.05, 1.05]  # a whole 0-1 share with a pad: a point at 0% or 100% is drawn whole, not cut in half


def second_axis(fig: go.Figure, title: str, percent: bool = False, whole_share: bool = False) -> go.Figure:
    """A right-hand y axis (``yaxis2``) for a quantity on another scale than the left one (a 0-1 rate beside a
    count): traces drawn with ``line(..., yaxis="y2")`` use it; ``percent``: 0-100% of a fraction. ``whole_share``:
    the axis spans the whole share, 0-100% padded (``SHARE_RANGE``), for a share that runs from 0 to 1 (DPO's
    reward accuracies); otherwise it starts at 0 and fits the data (a tie rate of 1% keeps its own scale). The right
    margin grows to its tick labels and title (``automargin``); the legend stays under the plot."""
    # rangemode "tozero" ends the axis exactly at 0: a point there was half under the plot's edge
    span = dict(range=SHARE_RANGE) if whole_share else dict(rangemode="tozero")
    fig.update_layout(yaxis2=dict(title=title, overlaying="y", side="right", showgrid=False, automargin=True,
                                  **span, **(PERCENT_AXIS if percent else {})))
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
