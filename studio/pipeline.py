"""The Run tab's picture of one iteration: its stages in order as a pipeline of cards.

``pipeline_html(store, run_id, snapshot, live)`` draws the iteration a job is working on (else the run's newest
iteration with stages): one card per stage (iteration 0: warm start, if any, and the evaluation of the starting
agents; later iterations: the eight MOAT stages), each with its state, a progress bar, the ETA while it runs, its
wall time once done (every span it ran: a stop and its resume count both) and the one-line summary of
``studio.stage_text``, which never repeats the state: a running stage's says what it does, with the worker's last
progress message ("sampling plans: 12 plans"), a failed one's its error's first line (a card has no error column);
a stopped stage says "stopped" once, its bar and count where the worker's last job left it (when that job was this
run's), its summary what it kept and how it goes on. Progress and ETA come from the job
worker's events (``snapshot``); states, times and summaries from the store. A stage the store marks running while no
job of this studio runs it is shown interrupted (``live`` is False), as the stage table does. In a curriculum
(``[[schedule.phases]]``) the title names the iteration's phase and the stages it leaves out show as skipped. The two
training cards name how the iteration trains each role (``stages.planner_objective``: "4 · DPO planner" or
"4 · GRPO planner"; ``stages.grounder_objective``: "7 · SFT grounder" or "7 · GRPO grounder"), from what the stage
recorded it ran, else the run's config for that iteration (``studio.stage_text.objectives``). The numbers are the
stages' places among the eight MOAT stages: iteration 0's cards (warm start, evaluate) carry none.
"""

from __future__ import annotations

import html
from typing import Any

from engine.loop import STAGES, WARM_START
from engine.store import Store
from studio.stage_text import OBJECTIVE_NAMES, objectives, shown_status, stage_seconds, stage_summary

COLOURS = {"done": "#2e7d32", "running": "#1565c0", "failed": "#c62828", "stopped": "#ef6c00",
           "interrupted": "#ef6c00", "skipped": "#757575", "pending": "#9e9e9e"}
# The training cards' labels take the objective: "4 · {planner} planner" -> "4 · GRPO planner" (see ``label``).
LABELS = {"sample": "1 · sample plans", "score": "2 · score by grounder", "pairs": "3 · preference pairs",
          "train_planner": "4 · {planner} planner", "ground": "5 · ground plans", "critique": "6 · critic",
          "train_grounder": "7 · {grounder} grounder", "evaluate": "8 · evaluate",
          "warm_start_planner": "warm start planner", "warm_start_grounder": "warm start grounder"}


def label(name: str, trained_by: dict[str, str], counts: dict[str, Any] | None = None,
          numbered: bool = True) -> str:
    """The card's title: ``LABELS`` with each role's objective (``trained_by``, e.g. ``{"planner": "GRPO",
    "grounder": "SFT"}``); a training stage's own record of what it ran (``counts["objective"]``) comes first.
    ``numbered=False`` drops the stage's place among the eight MOAT stages ("8 · evaluate" -> "evaluate")."""
    ran = OBJECTIVE_NAMES.get(str(counts.get("objective") or "")) if isinstance(counts, dict) else None
    role = {"train_planner": "planner", "train_grounder": "grounder"}.get(name)
    names = {**trained_by, **({role: ran} if role and ran else {})}
    text = LABELS.get(name, name).format(**names)
    return text if numbered else text.split(" · ", 1)[-1]


def _iteration(store: Store, run_id: str, snapshot: dict[str, Any], live: bool) -> int | None:
    if live:
        for event in reversed(snapshot.get("events") or []):
            if event.get("iteration") is not None:
                return int(event["iteration"])
    iterations = store.iterations(run_id)
    return max(iterations) if iterations else None


def _progress(snapshot: dict[str, Any], iteration: int, stage: str) -> dict[str, Any] | None:
    for event in reversed(snapshot.get("events") or []):
        if event.get("iteration") == iteration and event.get("stage") == stage:
            return event
    return None


def _card(name: str, title: str, status: str, fraction: float, detail: str, summary: str) -> str:
    colour = COLOURS.get(status, "#9e9e9e")
    return (f'<div class="moat-stage" data-stage="{html.escape(name)}" data-status="{html.escape(status)}" '
            f'style="flex:1 1 0;min-width:120px;border:1px solid #ddd;border-top:4px solid {colour};'
            f'border-radius:6px;padding:6px 8px;font-size:13px">'
            f'<div style="font-weight:600">{html.escape(title)}</div>'
            f'<div style="color:{colour}">{html.escape(status)}{html.escape(detail)}</div>'
            f'<div role="progressbar" aria-valuenow="{round(100 * fraction)}" aria-valuemin="0" aria-valuemax="100" '
            f'style="height:6px;background:#eee;border-radius:3px;margin:4px 0">'
            f'<div style="height:6px;width:{100 * fraction:.0f}%;background:{colour};border-radius:3px"></div></div>'
            f'<div style="color:#444">{html.escape(summary)}</div></div>')


def pipeline_html(store: Store, run_id: str | None, snapshot: dict[str, Any], live: bool) -> str:
    """The iteration's stages as cards (see the module docstring); a sentence when the run has no stage yet."""
    if not run_id:
        return "<p>Pick a run, or start a new one.</p>"
    iteration = _iteration(store, run_id, snapshot, live)
    if iteration is None:
        return "<p>Nothing has run yet: <b>Next iteration</b> evaluates the starting agents, then runs MOAT.</p>"
    statuses = store.stage_status(run_id, iteration)
    trained_by = objectives(store, run_id, iteration)
    moat = iteration > 0 or any(name in statuses for name in STAGES if name != "evaluate")
    names = [name for name in WARM_START if name in statuses] + (list(STAGES) if moat else ["evaluate"])
    cards = []
    for name in names:
        row = statuses.get(name) or {}
        status = shown_status(row.get("status") or "pending", live)
        fraction, detail = (1.0 if status in ("done", "skipped") else 0.0), ""
        # A stopped stage's last progress, when the worker's last job (running or not) is this run's: how far it got.
        event = _progress(snapshot, iteration, name) if live or (
            status == "stopped" and snapshot.get("run_id") == run_id) else None
        if status in ("running", "stopped") and event and event.get("total"):
            fraction = min(1.0, float(event.get("done") or 0) / float(event["total"]))
            detail = f" · {'at ' if status == 'stopped' else ''}{event.get('done')}/{event.get('total')}"
            if status == "running" and event.get("eta_s") is not None:
                detail += f" · ETA {float(event['eta_s']):.0f} s"
        elif status == "done" and stage_seconds(row) is not None:
            detail = f" · {stage_seconds(row):.1f} s"
        # No error column beside a card: a failed stage's summary gives its error's first line.
        summary = stage_summary(store, run_id, iteration, name, status, row.get("counts"), row.get("error"),
                                event.get("message") if event and status == "running" else None)
        # Numbered only among the eight MOAT stages: iteration 0's lone card read "8 · evaluate".
        cards.append(_card(name, label(name, trained_by, row.get("counts"), numbered=moat), status, fraction, detail,
                           summary))
    phases = {(row.get("counts") or {}).get("phase") for row in statuses.values()
              if isinstance(row.get("counts"), dict)} - {None}
    title = f"<div style='font-weight:600;margin-bottom:4px'>Iteration {iteration}" + (
        " (the starting agents)" if iteration == 0 else "") + "".join(
        f" · phase {html.escape(str(p))}" for p in sorted(phases)) + "</div>"
    return (title + '<div id="moat-pipeline" style="display:flex;gap:6px;flex-wrap:wrap">' + "".join(cards)
            + "</div>")
