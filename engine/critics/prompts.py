"""Critic prompts: what a model critic (``openai`` or ``hf`` backend) is asked about one grounding.

Contract: ``critic_messages(item)`` returns ``[{"role": "system", ...}, {"role": "user", ...}]`` for a
``Grounding`` of domain maths, qa or web. The user turn shows the task, the subgoals (``Subgoal k: ...``), the
grounded actions, what executing them produced (values, answer or error; long values are shortened) and the
domain's action list (``engine.prompts.ACTION_LISTS``). The critic must answer in exactly one of two forms, which
``engine.critics.parsing`` reads:

* ``Final answer reached`` when the subgoals and actions solve the task;
* ``Corrected Subgoals: Subgoal 1: ...; Subgoal 2: ...`` then, on the next line,
  ``Corrected Actions: R1 = ...; R2 = ...``.

The gold answer is never shown: the critic judges the reasoning, not a lookup. The text is deterministic for a
given item, so it is a stable cache key (``engine.critics.openai_backend``).
"""

from __future__ import annotations

from typing import Any

from engine.critics.base import Grounding
from engine.prompts import ACTION_LISTS, format_subgoals

Message = dict[str, str]

ACCEPT_FORM = "Final answer reached"
SUBGOALS_LABEL = "Corrected Subgoals:"
ACTIONS_LABEL = "Corrected Actions:"
MAX_VALUE_CHARS = 300  # one executed value (QA passages, web pages can be long)
MAX_VALUES = 20

SYSTEM = (
    "You review the work of two cooperating agents. A planner broke a task into subgoals; a grounder turned the "
    "subgoals into executable actions for a fixed set of tools. You check whether the subgoals are a sound plan "
    "and whether the actions carry them out correctly with the available tools, and you fix them when they do not."
)

DOMAIN_ROLE = {
    "maths": "The task is a maths word problem. Check every quantity, operation and equation against the question.",
    "qa": "The task is a knowledge question that may need several retrieval and reading steps. Check that each "
          "query asks for the right fact and that later steps use the earlier results correctly.",
    "web": "The task is to operate a web page. Check that each action targets the right element of the page and "
           "types or selects the right text.",
}

ANSWER_RULES = (
    "Answer in exactly one of these two forms and write nothing after it.\n"
    f"1. If the subgoals and actions solve the task correctly, reply with the single line: {ACCEPT_FORM}\n"
    "2. Otherwise reply with the full corrected plan and its full corrected actions, in this layout:\n"
    f"{SUBGOALS_LABEL} Subgoal 1: <first subgoal>; Subgoal 2: <second subgoal>; ...\n"
    f"{ACTIONS_LABEL} R1 = <Tool>(<arguments>); R2 = <Tool>(<arguments>); ...\n"
    "Corrected actions may only use the tools in the action list, one assignment per action, separated by "
    "semicolons, and later actions may refer to earlier results (R1, R2, ...)."
)


def _shorten(text: Any, limit: int = MAX_VALUE_CHARS) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def execution_text(execution: dict[str, Any]) -> str:
    """What running the actions produced, in a few lines (empty when nothing was executed)."""
    if not execution:
        return ""
    lines = []
    values = execution.get("values") or {}
    for name, value in list(values.items())[:MAX_VALUES]:
        lines.append(f"{name} = {_shorten(value)}")
    if len(values) > MAX_VALUES:
        lines.append(f"... ({len(values) - MAX_VALUES} more values)")
    if execution.get("error"):
        lines.append(f"Execution stopped with an error: {_shorten(execution['error'])}")
    elif execution.get("answer") not in (None, ""):
        lines.append(f"Final result: {_shorten(execution['answer'])}")
    return "\n".join(lines)


def critic_user(item: Grounding) -> str:
    """The user turn for one grounding."""
    domain = item.task.domain
    if domain not in ACTION_LISTS:
        raise ValueError(f"no critic prompt for domain {domain!r} (known: {', '.join(ACTION_LISTS)})")
    parts = [DOMAIN_ROLE[domain], "", ACTION_LISTS[domain].strip(), "", f"Task: {item.task.question.strip()}"]
    if item.step > 0:
        parts.append(f"(This is step {item.step} of an iterative plan: judge only the subgoal below.)")
    parts += [f"Subgoals: {format_subgoals([s.strip() for s in item.subgoals]) or '(none)'}",
              f"Actions: {item.actions.strip() or '(none)'}"]
    executed = execution_text(item.execution)
    if executed:
        parts += ["Executed results:", executed]
    parts += ["", ANSWER_RULES]
    return "\n".join(parts)


def critic_messages(item: Grounding) -> list[Message]:
    """System + user chat messages asking the critic to judge ``item``."""
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": critic_user(item)}]
