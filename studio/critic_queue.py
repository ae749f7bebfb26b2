"""The Critic tab's queue, read from the store (no Gradio events): a page of verdicts as a table (``verdict_table``),
a verdict's key (``task|step|k``) and the label the picker shows (``verdict_label``, ``verdict_name``; a page's:
``verdict_labels``, ``page_labels``: with the pick's own label when it has left the page),
its view: the judged plan, the grounder's actions, the critic's correction and the action-by-action diff
(``verdict_detail``, ``verdict_view``), why a queue is empty (``empty_note``), and the critic-curator agreement above
the queue (``agreement_markdown``). ``studio.tab_critic`` wires them to the page.

The view's head gives the gold answer (an iterative step's: the gold step's result) and what the grounded actions
and the critic's correction (or the curator's live edit) reach, each right or wrong (``outcomes_html``): the
original's as the ground stage stored it (the table's "runs"/"correct"), the correction's executed with the run's
tools and judged as the ground stage judges (``engine.stages.ground.judge``), cached per store, run, task, step and
actions text (``gold_and_outcome``). It names the live decision with the one it replaced and who last said "looks
right" (``studio.pairs_queue.decision_line``); the table shows a "looks right" with no decision as ``looks right``
and its reviewer in the action and curator columns.
"""

from __future__ import annotations

import html
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import gradio as gr
import pandas as pd

from engine.agreement import agreement
from engine.dbutil import records
from engine.outcome import gold_step_results, is_solved, step_matches, step_result, toolbox_for_run
from engine.stages.ground import judge
from engine.store import Store
from studio.keys import action_words
from studio.pairs_queue import decision_line, excerpt, mark_looks_right
from studio.picks import with_own_label
from studio.queue_lines import nothing_in_iteration
from studio.render import action_diff_html, md_escaped, pre

PAGE = 20
# (label, value): the status filter's "no filter" is the value "" (what the endpoint and the saved filters carry),
# labelled "any" (it was a blank entry).
STATUSES = [("any", ""), *((s, s) for s in ("accepted", "corrected", "unfixable", "unparsed", "truncated", "error"))]
# The key first (a row click reads the first cell), then the short columns a curator decides by, then the question in
# a capped width (WIDTHS): at ~1400 px an uncapped question pushed status, override and curator off-screen.
# "runs": the grounded actions executed without an error (groundings.ok); "correct": they reach the gold answer
# (groundings.correct). One "grounding_ok" column (clipped to "groundin…") read "true" on wrong answers.
COLUMNS = ["key", "domain", "status", "runs", "correct", "override_action", "curator", "question"]
WIDTHS = ["150px", "80px", "105px", "70px", "85px", "150px", "100px", "440px"]
GROUNDING_COLUMNS = {"grounding_ok": "runs", "grounding_correct": "correct"}


def verdict_key(task_id: str, step: int, k: int) -> str:
    return f"{task_id}|{int(step)}|{int(k)}"


def parse_key(key: str) -> tuple[str, int, int]:
    task_id, step, k = key.rsplit("|", 2)
    return task_id, int(step), int(k)


def verdict_table(store: Store, run_id: str | None, iteration: int | None, status: str = "",
                  reviewed: str = "any", page: int = 1, size: int = PAGE, order: str = "task"
                  ) -> tuple[pd.DataFrame, int]:
    """A page of the critic queue; ``reviewed``: any | yes | no (acted on or marked "looks right" by anybody) |
    overruled (the curators' live decision went against the critic: ``engine.verdict_views.AGREES_WITH_CRITIC``)."""
    if not run_id or iteration is None:
        return pd.DataFrame(columns=COLUMNS), 0
    df = store.verdict_queue(run_id, int(iteration), status=status or None, limit=size,
                             offset=(max(int(page), 1) - 1) * size,
                             reviewed={"yes": True, "no": False}.get(reviewed), order=order or "task",
                             overruled=True if reviewed == "overruled" else None)
    total = int(df["total"].iloc[0]) if len(df) else 0
    df = df.assign(key=[verdict_key(*r) for r in zip(df["task_id"], df["step"], df["k"])],
                   **{name: [_yes_no(v) for v in df[column]] for column, name in GROUNDING_COLUMNS.items()})
    # a "looks right" with no decision shows in the action and curator columns (it left them blank)
    return mark_looks_right(df, list(df["looks_right_curator"]))[COLUMNS], total


def _yes_no(value: Any) -> str:
    """A grounding flag as a word: no grounding (NULL) reads "—", not "None" or "nan"."""
    return "—" if value is None or pd.isna(value) else ("yes" if bool(value) else "no")


def empty_note(iteration: int | None, status: str = "", reviewed: str = "any", unfiltered: int = 0,
               skipped: str | None = None) -> str:
    """Why the critic queue shows no row: the iteration has no verdict at all (``unfiltered``, its count without
    filters, is 0: iteration 0 samples no plans, a variant may skip the critic -- ``skipped`` is then the critique
    stage's recorded reason --, a later iteration may not have reached its critique), or the filters set (named)."""
    if iteration is None:
        return "pick a run and an iteration above"
    if not unfiltered:
        return nothing_in_iteration(iteration, "verdicts", "critique", skipped)
    words = ([f"critic status {status}"] if status else []) + (
        [{"overruled": "reviewed = overruled the critic"}.get(reviewed, f"reviewed = {reviewed}")]
        if reviewed in ("yes", "no", "overruled") else [])
    return "no verdict matches these filters: " + (", ".join(words) or "none set")


def verdict_label(question: str, key: str, status: str) -> str:
    """What the verdict picker shows: the question's start, the step (iterative plans), the plan, the status and the
    task id (two questions can start alike)."""
    task_id, step, k = parse_key(key)
    return f"{excerpt(question)}{f' · step {step}' if step else ''} · plan {k} · {status} · {task_id}"


def verdict_labels(df: pd.DataFrame) -> list[tuple[str, str]]:
    """The verdict picker's choices for a page of ``verdict_table``: ``(verdict_label, key)`` per row."""
    return [(verdict_label(q, k, status), k) for q, k, status in zip(df["question"], df["key"], df["status"])]


def verdict_name(store: Store, run_id: str, iteration: int, key: str) -> str:
    """A verdict as the picker names it (question, step, plan, status), not by its task|step|k key."""
    task_id, step, k = parse_key(key)
    row = store.frame("verdicts", run_id, int(iteration), task_id=task_id, step=step, k=k)
    return verdict_label(store.get_task(run_id, task_id).question, key,
                         str(row["status"].iloc[0]) if len(row) else "gone")


def page_labels(store: Store, run_id: str | None, iteration: int | None, df: pd.DataFrame,
                current: str | None = None) -> list[tuple[str, str]]:
    """The verdict picker's choices for a page (``verdict_labels``); with ``current`` not on the page (a refresh after
    ``j``/``k`` read a page the verdict has left: another curator's decision took it off a *Reviewed = no* queue), its
    own label kept among them, as the Pairs tab's ``page_labels`` does (``studio.picks.with_own_label``)."""
    labels = verdict_labels(df)
    if not run_id or iteration is None:
        return labels
    return with_own_label(labels, current, lambda key: verdict_name(store, run_id, int(iteration), key))


def _row(store: Store, run_id: str, iteration: int, key: str) -> dict[str, Any] | None:
    task_id, step, k = parse_key(key)
    df = store.verdict_rows(run_id, int(iteration))
    df = df[(df["task_id"] == task_id) & (df["step"] == step) & (df["k"] == k)]
    return records(df.iloc[:1])[0] if len(df) else None


def _subgoals(text: Any, step: int = 0) -> str:
    """Numbered subgoals; an iterative plan's one subgoal carries its step's number (steps count from 1)."""
    return "\n".join(f"{i}. {s}" for i, s in enumerate(json.loads(text) if text else [], max(int(step or 0), 1)))


@dataclass(frozen=True)
class Outcome:
    """What a set of actions reaches when executed, judged as the ground stage judges a grounding
    (``engine.stages.ground.judge``): the answer (None: none), the execution error (None: it ran) and whether it
    reaches the gold answer (an iterative step's: the gold step's result)."""

    answer: str | None
    error: str | None
    correct: bool
    not_run: str | None = None  # why these actions are not executed here (web; a QA tool calling a remote model)


# Executed outcomes of corrections and edits, per (store file, run, task, step, actions): a QA tool may call a model,
# and the detail is drawn again at every pick, walk and action. Bounded; the executor parses (never evals) the text.
_OUTCOMES: OrderedDict[tuple, tuple[str, Outcome]] = OrderedDict()
_OUTCOMES_LOCK = threading.Lock()
_OUTCOMES_MAX = 512


def _text(value: Any) -> str | None:
    """A stored text cell as text, None for NULL or pandas' NaN (never "nan" in a sentence)."""
    return None if value is None or (isinstance(value, float) and value != value) else str(value)


def gold_and_outcome(store: Store, run_id: str, task_id: str, step: int,
                     actions: str | None) -> tuple[str, Outcome | None]:
    """``(gold, outcome)``: the answer a verdict's actions must reach (the task's answer; an iterative step's gold
    step result) and what ``actions`` reach (None when there are none to run), executed with the run's tools as the
    ground stage ran them (``engine.stages.ground.judge``, ``engine.outcome``); cached. Not executed here, with the
    reason in ``Outcome.not_run``: web actions (nothing runs for them: ``engine.executor``) and a QA task whose run
    calls a remote QA model (``tools.qa_model``: a call, perhaps a long timeout, at every first view of a verdict in a
    curator's key-press path; *Run edit* runs it on request). A tool that raises is shown and not cached: the next
    view tries again."""
    key = outcome_key(store, run_id, task_id, step, actions)
    with _OUTCOMES_LOCK:
        if key in _OUTCOMES:
            _OUTCOMES.move_to_end(key)
            return _OUTCOMES[key]
    task = store.get_task(run_id, task_id)
    gold_results = gold_step_results(task) if step else []  # the gold steps' results, for an iterative step's gold
    gold = str(task.answer) if not step else (gold_results[step - 1] if step <= len(gold_results) else "")
    outcome = None
    if actions:
        not_run = _not_run_here(store, run_id, task.domain)
        if not_run:
            outcome = Outcome(None, None, False, not_run)
        else:
            try:
                execution, correct = judge(task, int(step), actions, gold_results, toolbox_for_run(store, run_id))
                outcome = Outcome(_text(execution.get("answer")), _text(execution.get("error")), bool(correct))
            except Exception as exc:  # noqa: BLE001 -- a tool failing (a QA model unreachable) must not break the view
                return gold, Outcome(None, f"could not run: {exc}", False)  # not cached: it may work next time
    remember_outcome(key, gold, outcome)
    return gold, outcome


def outcome_key(store: Store, run_id: str, task_id: str, step: int, actions: str | None) -> tuple:
    """The cache key of one verdict's actions: the actions text is in it, so an entry is never stale."""
    return (str(getattr(store, "path", id(store))), run_id, task_id, int(step), actions)


def judged_preview(task: Any, step: int, actions: str, result: Any) -> tuple[str, bool]:
    """``(gold, correct)`` for an execution already made (an edit's preview), judged as
    ``engine.stages.ground.judge`` judges one: the final answer for a onetime plan, the step's result against the
    gold step's for an iterative step."""
    if not step:
        return str(task.answer), is_solved(task, result)
    gold_results = gold_step_results(task)
    gold = gold_results[step - 1] if step <= len(gold_results) else ""
    return gold, result.ok and step_matches(task, step_result(result, actions), gold)


def remember_outcome(key: tuple, gold: str, outcome: Outcome | None) -> None:
    """Keep ``(gold, outcome)`` under ``key`` (``gold_and_outcome``'s), the oldest entries dropped past the bound."""
    with _OUTCOMES_LOCK:
        _OUTCOMES[key] = (gold, outcome)
        while len(_OUTCOMES) > _OUTCOMES_MAX:
            _OUTCOMES.popitem(last=False)


def _not_run_here(store: Store, run_id: str, domain: str) -> str | None:
    """Why actions of ``domain`` are not executed for the detail (None: they are)."""
    if domain == "web":
        return "web actions are not executed here (a web step is scored against the gold actions)"
    if domain == "qa":
        tools = ((store.get_run(run_id) or {}).get("config") or {}).get("tools") or {}
        if tools.get("qa_model"):
            return "not run here: its QA tool calls the run's model (tools.qa_model); *Run edit* runs it"
    return None


def outcome_words(outcome: Outcome, gold: str) -> str:
    """One outcome in words (HTML, escaped): "does not run: <error>", or the answer and whether it is the gold one."""
    if outcome.not_run:
        return html.escape(outcome.not_run)
    if outcome.error:
        return f"does not run: {html.escape(outcome.error)} (no answer)"
    got = "no answer" if outcome.answer is None else f"answer <b>{html.escape(outcome.answer)}</b>"
    return f"{got} · {'✓ the gold answer' if outcome.correct else f'✗ not the gold answer ({html.escape(gold)})'}"


def _original_outcome(store: Store, v: dict[str, Any]) -> Outcome | None:
    """The grounding's outcome as the ground stage stored it (what the table's "runs"/"correct" columns read); run
    again (cached) only when the stored row holds neither an answer nor an error (a store written without them)."""
    actions = v.get("grounding_actions")
    if actions is None:
        return None
    if v.get("domain") == "web":  # nothing runs for web actions: no answer is not a wrong answer
        return Outcome(None, None, False, _not_run_here(store, v["run_id"], "web"))
    answer, error = _text(v.get("grounding_answer")), _text(v.get("grounding_error"))
    if answer is None and error is None and bool(v.get("grounding_ok")):
        return gold_and_outcome(store, v["run_id"], v["task_id"], int(v.get("step") or 0), actions)[1]
    return Outcome(answer, None if bool(v.get("grounding_ok")) else (error or "execution failed"),
                   bool(v.get("grounding_correct")))


def outcomes_html(store: Store, v: dict[str, Any], fix: str | None, fix_label: str) -> str:
    """One line under the verdict's head: the gold answer (an iterative step's: the gold step's result), what the
    grounded actions reach (``_original_outcome``) and what ``fix`` (the critic's correction or the curator's edit,
    named ``fix_label``) reaches, executed now (``gold_and_outcome``), each right or wrong: a curator choosing between
    *Accept original* and *Accept correction* no longer redoes the arithmetic."""
    step = int(v.get("step") or 0)
    gold, fixed = gold_and_outcome(store, v["run_id"], v["task_id"], step, fix)
    what = "Gold answer" if not step else f"Gold result of step {step}"
    parts = [f"{what}: <b>{html.escape(gold)}</b>"]
    original = _original_outcome(store, v)
    if original is not None:
        parts.append(f"grounded actions → {outcome_words(original, gold)}")
    if fixed is not None:
        parts.append(f"{fix_label} → {outcome_words(fixed, gold)}")
    return f"<p>{' · '.join(parts)}</p>"


def verdict_detail(store: Store, run_id: str | None, iteration: int | None, key: str | None) -> tuple[str, str, str,
                                                                                                       str]:
    """``(original HTML, corrected HTML, diff HTML, actions to start an edit from)``."""
    return verdict_view(store, run_id, iteration, key)[:4]


def verdict_view(store: Store, run_id: str | None, iteration: int | None, key: str | None, read_only: bool = False
                 ) -> tuple[str, str, str, str, dict[str, Any]]:
    """``verdict_detail`` and the *Accept correction* button's update: interactive only when the critic made a
    correction to accept (and the studio is writable)."""
    if not (run_id and key) or iteration is None:
        return "", "", "", "", gr.update(interactive=False)
    v = _row(store, run_id, iteration, key)
    if v is None:
        return "<p>No such verdict.</p>", "", "", "", gr.update(interactive=False)
    step = int(v.get("step") or 0)
    before = "step 1" if step == 2 else f"steps 1-{step - 1}"
    where = f" · step {step}, after the gold subgoals and actions of {before}" if step > 1 else (
        " · step 1" if step == 1 else "")
    head = f"<p><b>{_h(v['status'])}</b> ({_h(v['backend'])}) · {_h(v['question'])}{where}</p>"
    edited = _curator_edit(v)
    fix = edited if edited is not None else (v["corrected_actions"] or None)
    gold = outcomes_html(store, v, fix, "the curator's edit" if edited is not None else "the critic's correction")
    # the decision (and the one it replaced) and who last said "looks right": a review showed nothing before
    who = decision_line(store, v["override_action"], v["curator"], v.get("override_id"),
                        _text(v.get("looks_right_curator")))
    decided = f"<p>Curator: {_bold_first(who)}</p>" if who else ""
    plan = _subgoals(v["plan_subgoals_json"], step) or v["plan_text"]
    original = (head + gold + decided + "<b>Plan subgoals</b>" + pre(plan)
                + "<b>Grounded actions</b>" + pre(v["grounding_actions"])
                + "<details><summary>What the grounder saw (its prompt, as rendered)</summary>"
                + pre(v.get("grounding_prompt") or "") + "</details>")
    says = "<b>Critic says</b>" + pre(v["raw"])
    if edited is not None:
        # The curator's edit is what trains (engine.verdict_curation): show it, diff against it and start the next edit
        # from it. Showing the critic's correction here after a save read as if the edit had been lost.
        critic = ("<details><summary>The critic's correction, replaced by this edit</summary>"
                  + pre(v["corrected_actions"]) + "</details>") if v["corrected_actions"] else ""
        corrected = (f"<b>Curator's actions</b> (edit by {_h(v['curator'])})" + pre(edited) + critic + says)
        diff = ("<p><i>Grounded actions → the curator's actions, action by action (struck out: the original's; "
                "added: the edit's):</i></p>" + action_diff_html(v["grounding_actions"] or "", edited))
    elif v["corrected_actions"]:
        # A sound plan keeps its subgoals (only the actions are corrected): say so rather than show an empty block.
        subgoals = ("<b>Corrected subgoals</b>" + pre(_subgoals(v["corrected_subgoals_json"], step))
                    if v["corrected_subgoals_json"] else
                    "<p><i>Only the actions are corrected: the plan's own subgoals are kept.</i></p>")
        corrected = subgoals + "<b>Corrected actions</b>" + pre(v["corrected_actions"]) + says
        diff = ("<p><i>Grounded actions → corrected actions, action by action (struck out: the original's; "
                "added: the correction's):</i></p>" + action_diff_html(v["grounding_actions"] or "",
                                                                        v["corrected_actions"]))
    else:
        # No correction: one line instead of two empty headings; a diff against nothing would strike it all out.
        line = ("The critic accepted the grounding as it is: no correction." if v["status"] == "accepted" else
                f"No correction: the critic's verdict is <b>{_h(v['status'])}</b>.")
        corrected = f"<p><i>{line}</i></p>" + says
        diff = ""
    button = gr.update(interactive=bool(v["corrected_actions"]) and not read_only)
    return original, corrected, diff, edited or v["corrected_actions"] or v["grounding_actions"] or "", button


def _bold_first(line: str) -> str:
    """``decision_line``'s words, escaped, its first decision in bold ("<b>drop</b> by ben, looked right by cy")."""
    head, sep, rest = line.partition(" by ")
    return f"<b>{html.escape(head)}</b>{sep}{html.escape(rest)}"


def _curator_edit(v: dict[str, Any]) -> str | None:
    """The actions of the verdict's live curator edit (``override_action == "edit"``), else None."""
    if v.get("override_action") != "edit" or not v.get("override_after_json"):
        return None
    after = v["override_after_json"]
    after = json.loads(after) if isinstance(after, str) else after
    return str(after.get("actions") or "") or None


def _step_words(step: int | None) -> str:
    """``"step 2, "`` before a plan number of an iterative run (each step numbers its plans from 0); ``""`` for a
    onetime plan (step 0)."""
    return f"step {int(step)}, " if step else ""


def _decision_words(action: str) -> str:
    """A curator decision in the agreement line: a review is the curator's "looks right"."""
    return "looks right" if action == "reviewed" else action_words(action)


def _h(value: Any) -> str:
    """A value from data (a question, a status, a curator's name) in the verdict's HTML, shown as typed."""
    return html.escape(str(value))


def _rates(table: dict[str, dict[str, int]], words=str) -> str:
    """``name agreed/reviewed`` per name, each name (a curator's, a domain, a tool) shown as typed in the Markdown."""
    return ", ".join(f"{md_escaped(words(name))} {v['agreed']}/{v['reviewed']}"
                     for name, v in sorted(table.items())) or "—"


def agreement_markdown(store: Store, run_id: str | None, iteration: int | None) -> str:
    """The critic-curator agreement: overall, per domain, per tool the grounding calls, per decision and per curator,
    and the verdicts where curators overruled the critic (the *Overruled* button filters the queue to them). A
    "looks right" counts as agreeing (``engine.agreement``), so its "reviewed" matches the page's counter."""
    if not run_id or iteration is None:
        return ""
    a = agreement(store, run_id, int(iteration))
    rate = "—" if a["rate"] is None else f"{a['rate']:.0%}"
    overruled = ", ".join(f"{_step_words(d.get('step'))}plan {d['k']} of {md_escaped(d['task_id'])} "
                          f"({md_escaped(d['status'])} → {_decision_words(d['action'])})"
                          for d in a["disagreements"][:3])
    more = f" and {len(a['disagreements']) - 3} more" if len(a["disagreements"]) > 3 else ""
    return (f"**Agreement critic ↔ curators: {rate}** ({a['agreed']}/{a['reviewed']} reviewed of {a['verdicts']} "
            f"verdicts) · by domain: {_rates(a['by_domain'])} · by tool: {_rates(a['by_tool'])} · by decision: "
            f"{_rates(a['by_action'], _decision_words)} · by curator: {_rates(a['by_curator'])}"
            + (f"\n\n**Overruled the critic ({len(a['disagreements'])}):** {overruled}{more}" if overruled else ""))
