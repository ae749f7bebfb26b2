"""The Metrics tab's experiment view: an experiment's variants over iterations, rendered from
``engine.report.experiment_report`` (every mean, interval and test comes from there; nothing is recomputed here).

Handlers (plain functions of the store or the report dict):

* ``experiment_choices(store)``: ``(label, experiment_id)`` pairs, newest first (``engine.report.known_experiments``).
* ``experiment_figures(report) -> dict[name, go.Figure]`` (names in ``FIGURES``; a measure only when some variant
  has it, e.g. no held-in or held-out figure for a dev-only tuning experiment, and the held-in and held-out ones
  before any evaluation; ``held_out_by_domain`` only when held-out has domains):
  per figure, one mean line per variant (trace ``name`` = the variant) over a shaded 95% interval polygon
  (``"<variant> 95% CI"``, ``fill="toself"``), integer iteration ticks, one colour per variant in every figure.
  Accuracies are fractions shown as %. A variant whose points all have one seed gets no band (no zero-width
  polygon), and a figure with no interval anywhere says "1 seed: no interval" in its subtitle (else "mean over
  seeds, 95% interval"; ``studio.plots.titled``, the legend under the plot as in the run view); hovering a point shows
  the table's cell (``mean [lo, hi] (n seeds)``).
* ``experiment_table(report) -> str``: markdown, variant x iteration: ``mean [lo, hi] (n seeds)`` per measure (the
  figures' accuracies and gap PPL, and the gap as mean log-PPL too, the loss the PPL scores are made of) and under
  it, in the same cell, the paired t test against the baseline variant
  (``Δ vs <baseline>: diff (p=..., n=...)``; one seed: ``(1 seed, no interval)`` / ``(1 seed, no test)``), then
  incomplete and missing runs, and the wall time (the clock time with any run under way, ``wall_s.busy``, beside the
  stage time summed over runs) once a stage has finished.
* ``experiment_changes(report) -> str``: markdown, the CLI's "Change vs iteration 0" table (``vs_iteration_0``):
  accuracy Δ pp per evaluated split and the gap PPL's Δ % on held-out and dev, all domains and per domain, each
  ``diff (p=..., n=...)`` or ``(1 seed, no test)``; "" before any iteration past 0.
* ``experiment_swaps(store, report) -> str``: the stored swap table of each baseline-variant run
  (``studio.metrics_swaps.swap_markdown``).
* ``breakdown_choices(store, experiment_id)``: ``(label, split)`` pairs of the splits its runs have traces of
  (held-out first; ``engine.breakdown.evaluated_splits``).
* ``experiment_breakdown(store, experiment_id, split) -> str``: ``engine.breakdown.breakdown_markdown`` of that split
  (each template's accuracy, sound and vague plan shares and gold log-PPL, first -> last iteration, per variant), a
  line on how to read it and the CLI line that prints the same.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from engine.breakdown import breakdown_markdown, evaluated_splits, template_breakdown
from engine.report import SPLIT_NAMES, known_experiments
from engine.report_markdown import duration_text
from engine.store import Store
from studio.metrics_swaps import swap_markdown
from studio.plots import (
    HEIGHT,
    ITERATION_AXIS,
    LEGEND_BELOW,
    LOWER_IS_BETTER,
    PERCENT_AXIS,
    band_and_mean,
    colours,
    figure,
    fit_legend,
    titled,
)

FIGURES = ("held_in_accuracy", "held_out_accuracy", "dev_accuracy", "held_out_gap_ppl", "dev_gap_ppl",
           "held_out_by_domain")
TITLES = {"held_in_accuracy": "Held-in accuracy", "held_out_accuracy": "Held-out accuracy",
          "dev_accuracy": "Dev accuracy",
          "held_out_gap_ppl": "Held-out capability gap: gold-action PPL" + LOWER_IS_BETTER,
          "dev_gap_ppl": "Dev capability gap: gold-action PPL" + LOWER_IS_BETTER}
SUBPLOT_TITLE = 22  # px a domain's title takes above its plot in the per-domain figure
OPTIONAL = ("dev_accuracy", "dev_gap_ppl", "dev_gap_logppl")  # shown only when a variant was evaluated on dev
# (report key, column head, scale, digits) of the table; accuracies in %.
COLUMNS = (("held_in_accuracy", "held-in accuracy %", 100, 1), ("held_out_accuracy", "held-out accuracy %", 100, 1),
           ("dev_accuracy", "dev accuracy %", 100, 1), ("held_out_gap_ppl", "held-out gap PPL", 1, 3),
           ("held_out_gap_logppl", "held-out gap log-PPL", 1, 3), ("dev_gap_ppl", "dev gap PPL", 1, 3),
           ("dev_gap_logppl", "dev gap log-PPL", 1, 3))


def experiment_choices(store: Store) -> list[tuple[str, str]]:
    """The store's experiments as dropdown choices, newest first."""
    rows = sorted(known_experiments(store), key=lambda e: e["created_at"], reverse=True)
    return [(f"{e['name']} · {e['experiment_id']} ({e['runs']} runs)", e["experiment_id"]) for e in rows]


def _iterations(report: dict[str, Any], variant: str) -> list[tuple[int, dict[str, Any]]]:
    return sorted((int(t), cell) for t, cell in report["variants"][variant]["iterations"].items())


def _series(cells: list[tuple[int, dict[str, Any] | None]]) -> tuple[list[int], list[float], list[float], list[float],
                                                                  list[dict[str, Any]]]:
    """(iterations, means, lows, highs, the cells themselves) of the cells that have a mean."""
    kept = [(t, s) for t, s in cells if s and s.get("mean") is not None]
    return ([t for t, _ in kept], [s["mean"] for _, s in kept], [s["ci95"][0] for _, s in kept],
            [s["ci95"][1] for _, s in kept], [s for _, s in kept])


def _draw(fig: go.Figure, cells: list[tuple[int, dict[str, Any] | None]], variant: str, colour: str, unit: str,
          scale: float, digits: int, **where: Any) -> bool:
    """One variant's mean line, its band when some point has two seeds or more (one seed has no interval: no
    zero-width band), and a hover that reads as the table's cell (``_interval``). True when some point has an
    interval."""
    x, mean, lo, hi, kept = _series(cells)
    if not x:
        return False
    spread = any(c["n"] > 1 for c in kept)
    band_and_mean(fig, x, mean, lo, hi, variant, colour, band=spread,
                  hover=[f"{unit}: {_interval(c, scale, digits)}" for c in kept], **where)
    return spread


def _caption(spread: bool) -> str:
    """What a figure's shading is: a 95% interval over seeds, or none when every point has one seed."""
    return "mean over seeds, 95% interval" if spread else "1 seed: no interval"


def _has(report: dict[str, Any], key: str) -> bool:
    return any(key in cell for v in report["variants"] for _, cell in _iterations(report, v))


def _shown(report: dict[str, Any], keys: list[str]) -> list[str]:
    """The measures some variant has (a dev-only tuning experiment has no held-in or held-out column); before any
    evaluation, the held-in and held-out ones, so the view says what will come."""
    measured = [k for k in keys if _has(report, k)]
    return measured or [k for k in keys if k not in OPTIONAL]


def experiment_figures(report: dict[str, Any]) -> dict[str, go.Figure]:
    """The experiment's figures (see the module docstring)."""
    palette = colours(report["variants"])
    figs: dict[str, go.Figure] = {}
    shown = _shown(report, list(TITLES))
    for key, title in TITLES.items():
        if key not in shown:
            continue
        accuracy = key.endswith("accuracy")
        fig = figure(title, "iteration", "accuracy" if accuracy else "PPL", percent=accuracy)
        unit, scale, digits = ("accuracy %", 100, 1) if accuracy else ("gap PPL", 1, 3)
        spread = False
        for variant in report["variants"]:
            cells = [(t, cell.get(key)) for t, cell in _iterations(report, variant)]
            spread |= _draw(fig, cells, variant, palette[variant], unit, scale, digits)
        titled(fig, title, _caption(spread))
        figs[key] = fit_legend(fig)
    domains = sorted({d for v in report["variants"] for _, cell in _iterations(report, v)
                      for d in cell.get("by_domain", {}).get("held_out", {})})
    if domains:
        fig = make_subplots(rows=1, cols=len(domains), subplot_titles=[f"held-out {d}" for d in domains],
                            shared_yaxes=True)
        spread = False
        for col, domain in enumerate(domains, start=1):
            for variant in report["variants"]:
                cells = [(t, cell.get("by_domain", {}).get("held_out", {}).get(domain, {}).get("accuracy"))
                         for t, cell in _iterations(report, variant)]
                spread |= _draw(fig, cells, variant, palette[variant], "accuracy %", 100, 1, legend=col == 1,
                                row=1, col=col)
        fig.update_layout(height=HEIGHT, margin=dict(l=40, r=10, b=40), legend=LEGEND_BELOW)
        titled(fig, "Held-out accuracy per domain", _caption(spread))
        # The title stood on the plots' top edge, where the domains' titles stand: lifted by one of theirs.
        fig.update_annotations(font_size=12)
        fig.update_layout(title_pad_b=fig.layout.title.pad.b + SUBPLOT_TITLE,
                          margin_t=fig.layout.margin.t + SUBPLOT_TITLE)
        fig.update_xaxes(title="iteration", **ITERATION_AXIS)
        fig.update_yaxes(**PERCENT_AXIS)
        fig.update_yaxes(title="accuracy", row=1, col=1)
        figs["held_out_by_domain"] = fit_legend(fig)
    return figs


def _interval(cell: dict[str, Any] | None, scale: float, digits: int) -> str:
    if not cell or cell.get("mean") is None:
        return "–"
    n = cell["n"]
    if n == 1:  # a [mean, mean] "interval" is no width: say there is none
        return f"{cell['mean'] * scale:.{digits}f} (1 seed, no interval)"
    lo, hi = cell["ci95"]
    return f"{cell['mean'] * scale:.{digits}f} [{lo * scale:.{digits}f}, {hi * scale:.{digits}f}] ({n} seeds)"


def _test(cell: dict[str, Any] | None, scale: float, digits: int) -> str:
    if not cell or cell.get("diff") is None:
        return "–"
    if cell["n"] == 1:  # one seed pair: a difference, no test (its p = 1 is not evidence of no difference)
        return f"{cell['diff'] * scale:+.{digits}f} (1 seed, no test)"
    if cell.get("sd") == 0:  # every seed differed alike: a t test has no spread to go on
        return f"{cell['diff'] * scale:+.{digits}f} (the same on all {cell['n']} seeds, no test)"
    return f"{cell['diff'] * scale:+.{digits}f} (p={cell['p']:.3g}, n={cell['n']})"


def experiment_table(report: dict[str, Any]) -> str:
    """Variant x iteration markdown table with intervals and the paired tests vs the baseline."""
    shown = _shown(report, [c[0] for c in COLUMNS])
    columns = [c for c in COLUMNS if c[0] in shown]
    baseline = report["baseline"]
    done = sum(r["status"] == "done" for r in report["runs"])
    lines = [f"**{report['name']}** (`{report['experiment']}`): {len(report['runs'])} runs, {done} done; seeds "
             f"{', '.join(map(str, report['seeds'])) or '–'}; baseline: {baseline or '–'}. Means over seeds with 95% "
             "t intervals (n seeds); under each, Δ vs the baseline: the paired t test on the seeds both have "
             "(difference, p, n).", ""]
    head = ["variant", "iteration", *(c[1] for c in columns)]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for variant in report["variants"]:
        for t, cell in _iterations(report, variant):
            versus = cell.get("vs_baseline", {}) if baseline and variant != baseline else None
            row = [variant, str(t)]
            for key, _, scale, digits in columns:
                text = _interval(cell.get(key), scale, digits)
                if versus is not None:  # the paired test under the interval, in the same cell
                    text += f"<br>Δ vs {baseline}: {_test(versus.get(key), scale, digits)}"
                row.append(text)
            lines.append("| " + " | ".join(row) + " |")
    incomplete = [f"{r['variant']} seed {r['seed']} ({r.get('at', r['status'])})" for r in report["runs"]
                  if r["status"] != "done"]
    missing = [f"{m['variant']} seed {m['seed']}" for m in report["missing"]]
    if incomplete:
        lines += ["", f"Incomplete: {'; '.join(incomplete)}."]
    if missing:
        lines += ["", f"Missing (never started): {'; '.join(missing)}."]
    wall = report.get("wall_s", {})
    if wall.get("total"):
        lines += ["", f"Wall time: {duration_text(wall.get('busy', 0.0))} with any run under way (runs side by "
                      f"side counted once), {duration_text(wall['total'])} of stage time summed over the runs."]
    return "\n".join(lines)


def experiment_changes(report: dict[str, Any]) -> str:
    """The change against iteration 0, paired over seeds (the report's ``vs_iteration_0``, as the CLI's "Change vs
    iteration 0" table): accuracy in percentage points per evaluated split, the gap PPL in % of iteration 0's on
    held-out and dev, all domains and each domain; "" before a variant has an iteration past 0."""
    its = [(v, t, cell) for v in report["variants"] for t, cell in _iterations(report, v) if "vs_iteration_0" in cell]
    if not its:
        return ""
    accuracy = [s for s in SPLIT_NAMES if any(f"{s}_accuracy" in cell["vs_iteration_0"] for _, _, cell in its)]
    gaps = [(s, None) for s in ("held_out", "dev") if any(f"{s}_gap_ppl_pct" in c["vs_iteration_0"] for *_, c in its)]
    gaps = [(s, d) for s, _ in gaps for d in (None, *sorted({d for *_, c in its for d in
                                                             c["vs_iteration_0"].get(f"{s}_gap_ppl_pct_by_domain")
                                                             or {}}))]
    head = ["variant", "iteration", *(f"{SPLIT_NAMES[s]} accuracy Δ pp" for s in accuracy),
            *(f"{SPLIT_NAMES[s]}{f' {d}' if d else ''} gap PPL Δ %" for s, d in gaps)]
    lines = ["**Change vs iteration 0** (paired over seeds; accuracy in percentage points, the gap PPL in % of "
             "iteration 0's: below 0, the gap closed)", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for variant, t, cell in its:
        change = cell["vs_iteration_0"]
        row = [variant, str(t), *(_test(change.get(f"{s}_accuracy"), 100, 1) for s in accuracy),
               *(_test(change.get(f"{s}_gap_ppl_pct") if d is None else
                       (change.get(f"{s}_gap_ppl_pct_by_domain") or {}).get(d), 1, 1) for s, d in gaps)]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def experiment_swaps(store: Store, report: dict[str, Any]) -> str:
    """The swap table of every run of the baseline variant (the first variant when there is no baseline)."""
    variant = report["baseline"] or next(iter(report["variants"]), None)
    runs = sorted((r for r in report["runs"] if r["variant"] == variant), key=lambda r: r["seed"])
    if not runs:
        return ""
    parts = [f"### Swap tables of the {variant} runs"]
    for r in runs:
        parts += [f"#### {variant} seed {r['seed']} · `{r['run_id']}`", swap_markdown(store, r["run_id"])]
    return "\n\n".join(parts)


def breakdown_choices(store: Store, experiment_id: str) -> list[tuple[str, str]]:
    """The splits the experiment's runs were evaluated on, as dropdown choices (held-out first)."""
    return [(SPLIT_NAMES.get(split, split), split) for split in evaluated_splits(store, experiment_id)]


def experiment_breakdown(store: Store, experiment_id: str, split: str | None) -> str:
    """Per template of one split: accuracy, sound and vague plans and gold log-PPL, first -> last iteration, per
    variant."""
    if not split:
        return "No evaluation traces in this experiment's runs yet: the per-template view needs an evaluation."
    out = template_breakdown(store, experiment_id, split)
    if not out["variants"]:
        return f"No evaluation traces on {SPLIT_NAMES.get(split, split)} in this experiment's runs."
    # the reading rule of engine.breakdown: which agent holds a template back
    return "\n".join([
        "### By template", "",
        "A template whose sound-plan share stays low, or whose plans stay vague (\"Look it up.\": the critic "
        "accepts them, the grounder learns nothing from them), is held back by the planner; one with sound, specific "
        "plans and low accuracy, by the grounder. The same table: `python -m engine report "
        f"--db {store.path} --experiment {experiment_id} --by-template --split {split} --markdown`.", "",
        breakdown_markdown(out)])
