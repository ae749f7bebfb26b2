"""What each agent is shown and how its output is read: the glue between tasks, prompts and model text.

``Agent`` bundles a loaded model, its tokenizer and its chat-template choice. ``planner_prompt``/``grounder_prompt``
render generation or scoring prompts for a task; ``read_plan`` turns raw planner text into subgoals (never
raising: a malformed plan is data, flagged ``well_formed=False``). Stages, evaluation and benchmarks all go
through these, so a prompt is built one way everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine import prompts
from engine.formats.lumos import parse_subgoals
from engine.tasks import Task


@dataclass
class Agent:
    model: Any
    tokenizer: Any
    chat_template: str = "lumos"  # lumos | tokenizer


def _render(agent: Agent, messages: list[dict[str, str]]) -> str:
    return prompts.render_chat(messages, agent.chat_template, agent.tokenizer, add_generation_prompt=True)


def planner_prompt(agent: Agent, task: Task) -> str:
    """The onetime planner prompt, ending where the plan starts."""
    return _render(agent, prompts.planner_messages(task))


def grounder_prompt(agent: Agent, task: Task, subgoals: list[str]) -> str:
    """The onetime grounder prompt for ``subgoals``, ending where the actions start."""
    return _render(agent, prompts.grounder_messages(task, subgoals))


def planner_prompt_iterative(agent: Agent, task: Task, subgoals: list[str], results: list[str]) -> str:
    """The iterative planner prompt after ``subgoals`` with their executed ``results`` (same length)."""
    messages = prompts.planner_messages(task, subgoals, "iterative", results) if subgoals else \
        prompts.planner_messages(task)
    if subgoals and messages[-1]["role"] == "assistant" and messages[-1]["content"] == prompts.STOP_PLANNING:
        messages = messages[:-1]  # a result for the last subgoal closes the chat; we want the next turn
    return _render(agent, messages)


def grounder_prompt_iterative(agent: Agent, task: Task, subgoals: list[str], actions: list[str],
                              results: list[str]) -> str:
    """The iterative grounder prompt for subgoal ``len(actions) + 1``."""
    messages = prompts.grounder_messages(task, subgoals[:len(actions) + 1], actions, "iterative", results)
    return _render(agent, messages)


def read_plan(text: str) -> tuple[list[str], bool]:
    """``(subgoals, well_formed)``; malformed planner output gives ``([], False)``."""
    try:
        subgoals = [s.strip() for s in parse_subgoals(text.strip())]
    except ValueError:
        return [], False
    return subgoals, all(subgoals)
