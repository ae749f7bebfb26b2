"""Run a Lumos action string (``R1 = Calculator(3*4); R2 = Calculator(R1+5)``) with the tools of one domain.

Contract: ``execute(actions, domain, env)`` parses the text (``engine.actions``), runs each action in order with
the maths tools (domain "maths") or the QA tools plus Calculator (domain "qa"), keeps typed values (sympy objects,
equations, passages) between steps and renders them with ``value_to_text``; a variable holding an equation or an
expression stands for it in a later tool's formula (``R1 = SetEquation(3*y - 7 = 20); R2 = SolveEquation(R1)``
gives 9, as in Lumos). It stops at the first failing step and never raises on bad text. For "web" nothing runs:
each output's value is the action's ``arg_text`` and ``answer`` is None (Mind2Web step scoring lives elsewhere).
``answer`` is the value of ``Output``/``Answer`` when assigned, else of the last assigned variable -- and None when a
step failed: the last good value is not the actions' answer, and read as one it misled; the variables bound before
the failing step stay in ``values``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from engine.actions import Action, parse_actions
from engine.tools import qa as qa_tools
from engine.tools.base import ToolError, ToolResult
from engine.tools.math_values import value_to_text
from engine.tools.maths import MATHS_TOOLS, MathsState

ANSWER_NAMES = ("Output", "Answer")
QA_TOOLS = ("KnowledgeQuery", "ParagraphRetrieve", "QA", "Calculator", "Code")


@dataclass
class ToolEnv:
    corpus: qa_tools.Corpus | None = None  # QA passages
    qa_model: object | None = None  # optional .answer(context, question)
    time_limit_s: float = 2.0  # per tool call (bounds equation/inequality solving)


@dataclass
class StepResult:
    action: Action
    values: dict[str, str]  # outputs -> rendered value
    error: str | None
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": str(self.action),
            "span": list(self.action.span),
            "values": self.values,
            "error": self.error,
            "note": self.note,
        }


@dataclass
class ExecutionResult:
    ok: bool  # parsed and every step ran without error
    values: dict[str, str]  # every variable bound (before the failing step, on a failure) -> rendered text value
    answer: str | None  # value of Output/Answer if assigned, else of the last assigned variable; None unless ok
    error: str | None  # first error: parse error (with span) or "R3 = Foo(...): unknown tool Foo"
    steps: list[StepResult] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "values": self.values,
            "answer": self.answer,
            "error": self.error,
            "steps": [s.to_dict() for s in self.steps],
        }


def execute(actions: str, domain: str, env: ToolEnv | None = None) -> ExecutionResult:
    """Parse and run ``actions`` for ``domain`` ("maths", "qa" or "web")."""
    if domain not in ("maths", "qa", "web"):
        return ExecutionResult(False, {}, None, f"unknown domain {domain!r} (expected maths, qa or web)")
    parsed = parse_actions(actions)
    if not parsed.ok:
        return ExecutionResult(False, {}, None, f"parse error: {parsed.error}")
    if domain == "web":
        steps = [StepResult(a, {o: a.arg_text for o in a.outputs}, None) for a in parsed.actions]
        return ExecutionResult(True, {k: v for s in steps for k, v in s.values.items()}, None, None, steps)
    return _run(parsed.actions, domain, env or ToolEnv())


def _run(actions: list[Action], domain: str, env: ToolEnv) -> ExecutionResult:
    values: dict[str, Any] = {}
    state = MathsState()
    steps: list[StepResult] = []
    last: str | None = None
    for action in actions:
        try:
            result = _call(action, domain, values, state, env)
            assigned = _assign(action, result)
            shown = {k: value_to_text(v) for k, v in assigned.items()}  # a value too long to write out is this step's
        except ToolError as exc:
            steps.append(StepResult(action, {}, f"{action}: {exc}"))
            return _finish(values, last, steps, error=steps[-1].error)
        values.update(assigned)
        last = action.outputs[-1]
        steps.append(StepResult(action, shown, None, result.note))
    return _finish(values, last, steps, error=None)


def _finish(values: dict[str, Any], last: str | None, steps: list[StepResult], error: str | None) -> ExecutionResult:
    answer_name = next((n for n in reversed(list(values)) if n in ANSWER_NAMES), last)
    rendered = {k: value_to_text(v) for k, v in values.items()}
    answer = rendered.get(answer_name) if answer_name and error is None else None
    return ExecutionResult(error is None, rendered, answer, error, steps)


def _call(action: Action, domain: str, values: dict[str, Any], state: MathsState, env: ToolEnv) -> ToolResult:
    if action.tool is None:  # "Answer = R3" copies; any other right-hand side is a formula
        if action.arg_text in values:
            return ToolResult((values[action.arg_text],))
        if re.fullmatch(r"R\d+", action.arg_text):
            raise ToolError(f"undefined variable {action.arg_text}")
        return MATHS_TOOLS["Calculator"](action.arg_text, values, state, env.time_limit_s)
    tool = action.tool
    if domain == "maths" or (domain == "qa" and tool in ("Calculator", "Code")):
        if tool not in MATHS_TOOLS:
            raise ToolError(f"unknown tool {tool}")
        return MATHS_TOOLS[tool](action.arg_text, values, state, env.time_limit_s)
    if tool == "KnowledgeQuery":
        return qa_tools.knowledge_query(action.arg_text, values, env.corpus)
    if tool == "ParagraphRetrieve":
        return qa_tools.paragraph_retrieve(action.arg_text, values)
    if tool == "QA":
        return qa_tools.qa(action.arg_text, values, env.qa_model)
    raise ToolError(f"unknown tool {tool} (qa tools: {', '.join(QA_TOOLS)})")


def _assign(action: Action, result: ToolResult) -> dict[str, Any]:
    """One value per output; several values into one output become a tuple."""
    outputs, produced = action.outputs, result.values
    if len(outputs) == len(produced):
        return dict(zip(outputs, produced))
    if len(outputs) == 1:
        return {outputs[0]: tuple(produced)}
    raise ToolError(f"{action.tool} gave {len(produced)} value(s) for {len(outputs)} outputs")
