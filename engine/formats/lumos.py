"""Lumos planner/grounder chat records (``{"dataset", "id", "messages"}``, the ai2lumos/lumos_* layout) -> Tasks.

Contract:

* Each record's kind (planner or grounder) and formulation (onetime or iterative) are detected from its messages:
  planner onetime is ``[user, "Subgoal 1: ...; Subgoal 2: ..."]``; planner iterative alternates subgoals with
  "The executed result for Subgoal k is X. Should we stop planning?" (web: "We have already ... Should we stop
  planning?") and ends "Yes, I will stop planning."; grounder onetime has one "Subgoals to be grounded:" turn and
  one actions turn; grounder iterative has one "Subgoal to be grounded: Subgoal k: ..." turn per subgoal, each
  answered by that subgoal's actions.
* ``load_lumos(plan_path, ground_path=None, split="train")`` joins the two files by ``id`` into Tasks with the
  question, ``gold_subgoals`` (no "Subgoal k: " prefix) and ``gold_actions`` (one string per subgoal when iterative;
  a one-element list holding the whole action string when onetime, because a flat onetime grounding cannot be cut
  into per-subgoal groups reliably). meta holds ``dataset``, ``formulation`` (the grounder's when joined, else the
  file's), ``plan_formulation``, ``executed_results`` (iterative planner feedback) and ``grounding_results``
  (iterative QA grounder feedback). With no grounder file, the one file may hold either kind.
* Domains: maths -> maths, complex_qa -> qa, web_agent -> web; source is ``lumos:<dataset>``.
* Anything malformed, an id in only one file, or a planner/grounder pair that disagree on the question or subgoals
  raises ``DataError(path, line, field, ...)`` (field like ``id`` or ``messages[2].content``) before any Task is
  yielded: both files are read completely first so a bad join never produces a partial dataset.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import DataError
from engine.formats.common import check_split, expect_object, require_text
from engine.prompts import (
    ACTION_LISTS,
    GROUNDER_INSTRUCTION,
    GROUNDING_RESULTS,
    ITERATIVE_SUBGOAL,
    KEEP_PLANNING,
    ONETIME_SUBGOALS,
    PLANNER_INSTRUCTION,
    PLANNER_TASK_SUFFIX,
    STOP_PLANNING,
)
from engine.tasks import Task, read_jsonl

LUMOS_DOMAINS = {"maths": "maths", "complex_qa": "qa", "web_agent": "web"}

_RESULT_RE = re.compile(r"The executed result for Subgoal (\d+) is ?(.*)\. Should we stop planning\?", re.S)
_ALREADY_RE = re.compile(r"We have already ?(.*)\. Should we stop planning\?", re.S)
_GROUND_RESULT_SPLIT = re.compile(r" The execution result for Subgoal (\d+) is ")
_SUBGOAL_RE = re.compile(r"Subgoal (\d+): (.*)", re.S)


def parse_subgoals(text: str) -> list[str]:
    """``"Subgoal 1: a.; Subgoal 2: b."`` -> ``["a.", "b."]``.

    Splits only at ``"; Subgoal k: "`` with the next expected k, so a ";" inside a subgoal survives; trailing
    whitespace is kept (Lumos prompts reproduce it), so strip model output before parsing it. Raises
    ``ValueError`` when the text does not start with "Subgoal 1: " or a subgoal is empty.
    """
    # Only leading whitespace goes: Lumos subgoals may end with a space that its prompts reproduce.
    text = text.lstrip()
    head = "Subgoal 1: "
    if not text.startswith(head):
        raise ValueError(f"expected the plan to start with {head!r}, got {text[:40]!r}")
    subgoals, pos, k = [], len(head), 2
    while True:
        marker = f"; Subgoal {k}: "
        nxt = text.find(marker, pos)
        subgoals.append(text[pos:] if nxt < 0 else text[pos:nxt])
        if not subgoals[-1].strip():
            raise ValueError(f"subgoal {k - 1} is empty")
        if nxt < 0:
            return subgoals
        pos, k = nxt + len(marker), k + 1


def parse_planner_turn(text: str) -> tuple[int, str] | None:
    """An iterative planner turn -> ``(k, subgoal)``, or None for "Yes, I will stop planning." (alone: text after it
    is a ``ValueError``, like any other malformed turn)."""
    text = text.lstrip()
    if text.startswith(STOP_PLANNING):
        # Exactly the stop sentence (trailing whitespace aside): text after it was dropped unseen, a half-read turn.
        if text.rstrip() != STOP_PLANNING:
            raise ValueError(f"expected nothing after {STOP_PLANNING!r}, got {text[len(STOP_PLANNING) :][:40]!r}")
        return None
    if text.startswith(KEEP_PLANNING):
        text = text[len(KEEP_PLANNING) :]
    match = _SUBGOAL_RE.fullmatch(text)
    if not match or not match.group(2).strip():
        raise ValueError(f"expected 'Subgoal k: ...' or {STOP_PLANNING!r}, got {text[:40]!r}")
    return int(match.group(1)), match.group(2)


@dataclass
class _Record:
    """One parsed chat record; ``results`` is the planner's or the grounder's feedback, by ``kind``."""

    line: int
    id: str
    dataset: str
    kind: str  # "plan" or "ground"
    formulation: str  # "onetime" or "iterative"
    question: str = ""
    subgoals: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    results: list[str] = field(default_factory=list)


class _Where:
    """Raises located errors for one record, so parsers stay short."""

    def __init__(self, path: str, line: int):
        self.path, self.line = path, line

    def error(self, index: int | str, message: str) -> DataError:
        name = index if isinstance(index, str) else f"messages[{index}].content"
        return DataError(self.path, self.line, name, message)


def _messages(row: dict[str, Any], where: _Where) -> list[str]:
    """Validate the user/assistant alternation and return the contents."""
    messages = row.get("messages")
    if not isinstance(messages, list) or len(messages) < 2:
        raise where.error("messages", "must be a list of at least two chat messages")
    contents = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise where.error(f"messages[{i}]", "must be an object with role and content")
        expected = "user" if i % 2 == 0 else "assistant"
        if message.get("role") != expected:
            raise where.error(f"messages[{i}].role", f"expected {expected!r}, got {message.get('role')!r}")
        if not isinstance(message.get("content"), str) or not message["content"].strip():
            raise where.error(i, "must be a non-empty string")
        contents.append(message["content"])
    if len(contents) % 2:
        raise where.error(f"messages[{len(contents) - 1}].role", "the chat must end with an assistant turn")
    return contents


def _plan_question(content: str, where: _Where) -> str:
    head = PLANNER_INSTRUCTION + "Task: "
    if not content.startswith(head) or not content.endswith(PLANNER_TASK_SUFFIX):
        raise where.error(0, f"expected {head!r} ... {PLANNER_TASK_SUFFIX!r}")
    return content[len(head) : -len(PLANNER_TASK_SUFFIX)]


def _plan_feedback(content: str, k: int, domain: str, where: _Where, index: int) -> str:
    if domain == "web":
        match = _ALREADY_RE.fullmatch(content)
        if not match:
            raise where.error(index, "expected 'We have already ... Should we stop planning?'")
        return match.group(1)
    match = _RESULT_RE.fullmatch(content)
    if not match or int(match.group(1)) != k:
        raise where.error(index, f"expected 'The executed result for Subgoal {k} is ... Should we stop planning?'")
    return match.group(2)


def _parse_plan(rec: _Record, contents: list[str], domain: str, where: _Where) -> None:
    rec.question = _plan_question(contents[0], where)
    if len(contents) == 2:
        rec.formulation = "onetime"
        try:
            rec.subgoals = parse_subgoals(contents[1])
        except ValueError as exc:
            raise where.error(1, str(exc)) from None
        return
    rec.formulation = "iterative"
    for index in range(1, len(contents), 2):
        k = len(rec.subgoals) + 1
        try:
            turn = parse_planner_turn(contents[index])
        except ValueError as exc:
            raise where.error(index, str(exc)) from None
        is_last = index == len(contents) - 1
        if turn is None:
            if not is_last or index == 1:
                raise where.error(index, "'Yes, I will stop planning.' must be the last turn, after a subgoal")
            return
        if is_last:
            raise where.error(index, f"the iterative plan must end with {STOP_PLANNING!r}")
        prefix_ok = contents[index].startswith(KEEP_PLANNING) == (k > 1)
        if turn[0] != k or not prefix_ok:
            raise where.error(index, f"expected {'No, I will keep planning. ' if k > 1 else ''}Subgoal {k}: ...")
        rec.subgoals.append(turn[1])
        rec.results.append(_plan_feedback(contents[index + 1], k, domain, where, index + 1))


def _ground_turn(text: str, k: int, domain: str, where: _Where, index: int) -> tuple[str, dict[int, str]]:
    """A later iterative grounder turn -> (subgoal k, {i: result shown for subgoal i})."""
    prefix = f"{ITERATIVE_SUBGOAL}Subgoal {k}: "
    if not text.startswith(prefix) or not text.endswith("\n"):
        raise where.error(index, f"expected {prefix!r} ... ending with a newline")
    body = text[len(prefix) : -1]
    if domain != "qa" or k == 1:
        return body, {}
    subgoal, sep, listed = body.partition(GROUNDING_RESULTS)
    parts = _GROUND_RESULT_SPLIT.split(listed)
    if not sep or parts[0] != "":
        raise where.error(index, f"expected {GROUNDING_RESULTS.strip()!r} followed by the execution results")
    return subgoal, {int(i): r for i, r in zip(parts[1::2], parts[2::2], strict=True)}


def _parse_ground(rec: _Record, contents: list[str], domain: str, where: _Where) -> None:
    head = GROUNDER_INSTRUCTION + ACTION_LISTS[domain] + "Task: "
    first = contents[0]
    if not first.startswith(head):
        raise where.error(0, f"expected the grounder instruction with the {rec.dataset} action list and 'Task: '")
    rest = first[len(head) :]
    # The question ends at the marker grounder_header + the first subgoal put after it, not at the first " \n": a
    # question may hold " \n" itself (MATH problems do), and was cut there. "Subgoal 1: " is part of the marker so
    # that a question quoting the bare marker still splits right.
    onetime, iterative = f" \n{ONETIME_SUBGOALS}Subgoal 1: ", f" \n{ITERATIVE_SUBGOAL}Subgoal 1: "
    if onetime in rest and len(contents) == 2:
        rec.formulation = "onetime"
        rec.question, _, subgoals = rest.partition(onetime)
        if not subgoals.endswith("\n"):
            raise where.error(0, "the subgoals must end with a newline")
        try:
            rec.subgoals = parse_subgoals("Subgoal 1: " + subgoals[:-1])
        except ValueError as exc:
            raise where.error(0, str(exc)) from None
        rec.actions = [contents[1]]
        return
    if iterative not in rest:
        raise where.error(0, f"expected {onetime.strip()!r} (with one actions turn) or {iterative.strip()!r}")
    rec.formulation = "iterative"
    rec.question, _, tail = rest.partition(iterative)
    tail = iterative.lstrip(" \n") + tail  # _ground_turn reads every turn from its "Subgoal to be grounded: "
    shown: dict[int, str] = {}
    for index in range(0, len(contents), 2):
        text = tail if index == 0 else contents[index]
        subgoal, results = _ground_turn(text, index // 2 + 1, domain, where, index)
        rec.subgoals.append(subgoal)
        rec.actions.append(contents[index + 1])
        shown.update(results)
    if sorted(shown) != list(range(1, len(shown) + 1)):
        raise where.error("messages", f"execution results listed for subgoals {sorted(shown)}, expected 1..n")
    rec.results = [shown[i] for i in sorted(shown)]


def _parse_record(row: Any, path: str, line: int) -> _Record:
    where = _Where(path, line)
    row = expect_object(row, path, line)
    record_id = require_text(row, "id", path, line)
    dataset = require_text(row, "dataset", path, line)
    if dataset not in LUMOS_DOMAINS:
        raise where.error("dataset", f"{dataset!r} is not one of {', '.join(LUMOS_DOMAINS)}")
    contents = _messages(row, where)
    domain = LUMOS_DOMAINS[dataset]
    if contents[0].startswith(PLANNER_INSTRUCTION):
        rec = _Record(line, record_id, dataset, "plan", "")
        _parse_plan(rec, contents, domain, where)
    elif contents[0].startswith(GROUNDER_INSTRUCTION):
        rec = _Record(line, record_id, dataset, "ground", "")
        _parse_ground(rec, contents, domain, where)
    else:
        raise where.error(0, "neither a Lumos planner nor a grounder instruction")
    if not rec.question.strip():
        raise where.error(0, "the task text is empty")
    return rec


def _read(path: str, kind: str | None) -> dict[str, _Record]:
    """Parse a whole file; ``kind`` ("plan"/"ground") is enforced when two files are joined."""
    records: dict[str, _Record] = {}
    for line, row in read_jsonl(path):
        rec = _parse_record(row, path, line)
        if kind is not None and rec.kind != kind:
            wanted = "planner" if kind == "plan" else "grounder"
            raise DataError(path, line, "messages[0].content", f"expected a {wanted} record in this file")
        if rec.id in records:
            raise DataError(path, line, "id", f"duplicate id {rec.id!r} (first on line {records[rec.id].line})")
        records[rec.id] = rec
    return records


def _check_pair(plan: _Record, ground: _Record, ground_path: str) -> None:
    """A planner and grounder record joined by id must describe the same task (catches misaligned ids)."""
    checks = (
        ("dataset", plan.dataset == ground.dataset, f"dataset {ground.dataset!r} differs from planner's"),
        # An iterative plan joined with onetime actions loaded, then failed in the sample stage ("iterative planning
        # needs the executed result of subgoal 2"), naming no file: the two files come as a pair of one formulation.
        ("messages", plan.formulation == ground.formulation,
         f"{_article(ground.formulation)} grounder record joined with {_article(plan.formulation)} planner record; "
         "join files of one formulation (*_onetime with *_onetime, *_iterative with *_iterative)"),
        ("messages[0].content", plan.question == ground.question, "task text differs from the planner record's"),
        ("messages[0].content", plan.subgoals == ground.subgoals, "subgoals differ from the planner record's"),
    )
    for name, ok, message in checks:
        if not ok:
            raise DataError(ground_path, ground.line, name,
                            f"id {ground.id!r}: {message} (the planner record: line {plan.line})")


def _article(formulation: str) -> str:
    return "an iterative" if formulation == "iterative" else f"a {formulation}"  # "a onetime": said "one-time"


def _task(plan: _Record, ground: _Record | None, split: str) -> Task:
    main = ground or plan
    meta: dict[str, Any] = {"dataset": plan.dataset, "formulation": main.formulation}
    if plan.kind == "plan":
        meta["plan_formulation"] = plan.formulation
        if plan.formulation == "iterative":
            meta["executed_results"] = list(plan.results)
    if main.kind == "ground":
        meta["ground_formulation"] = main.formulation
        if main.formulation == "iterative" and LUMOS_DOMAINS[main.dataset] == "qa":
            meta["grounding_results"] = list(main.results)
    return Task(
        id=plan.id,
        domain=LUMOS_DOMAINS[plan.dataset],
        source=f"lumos:{plan.dataset}",
        split=split,
        question=plan.question,
        gold_subgoals=list(plan.subgoals),
        gold_actions=list(main.actions),
        meta=meta,
    )


def load_lumos(plan_path: str | Path, ground_path: str | Path | None = None, split: str = "train") -> Iterator[Task]:
    """Yield one Task per planner record (joined with its grounder record when ``ground_path`` is given)."""
    plan_path = str(plan_path)
    check_split(plan_path, split)
    if ground_path is None:
        for rec in _read(plan_path, None).values():
            yield _task(rec, None, split)
        return
    ground_path = str(ground_path)
    plans, grounds = _read(plan_path, "plan"), _read(ground_path, "ground")
    for rec in plans.values():
        if rec.id not in grounds:
            raise DataError(plan_path, rec.line, "id", f"id {rec.id!r} has no record in {ground_path}")
    for rec in grounds.values():
        if rec.id not in plans:
            raise DataError(ground_path, rec.line, "id", f"id {rec.id!r} has no record in {plan_path}")
        _check_pair(plans[rec.id], rec, ground_path)
    for rec in plans.values():
        yield _task(rec, grounds[rec.id], split)
