"""What each agent is shown and how its output is read: the glue between tasks, prompts and model text.

``Agent`` bundles a loaded model, its tokenizer and its chat-template choice. ``planner_prompt``/``grounder_prompt``
render generation or scoring prompts for a task; ``planner_step_messages``/``grounding_messages`` are the planner and
grounder chats of one step before rendering (the stages render them; the exports write them as messages);
``read_plan`` turns raw planner text into subgoals (never raising: a malformed plan is data, flagged
``well_formed=False``). Stages, evaluation, benchmarks and exports all go
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


def planner_turn_messages(task: Task, subgoals: list[str], results: list[str]) -> list[prompts.Message]:
    """The iterative planner chat after ``subgoals`` with their executed ``results`` (same length), ending on the
    user turn that asks for the next subgoal."""
    messages = prompts.planner_messages(task, subgoals, "iterative", results) if subgoals else \
        prompts.planner_messages(task)
    if subgoals and messages[-1]["role"] == "assistant" and messages[-1]["content"] == prompts.STOP_PLANNING:
        messages = messages[:-1]  # a result for the last subgoal closes the chat; we want the next turn
    return messages


def planner_prompt_iterative(agent: Agent, task: Task, subgoals: list[str], results: list[str]) -> str:
    """The iterative planner prompt after ``subgoals`` with their executed ``results`` (same length)."""
    return _render(agent, planner_turn_messages(task, subgoals, results))


def planner_step_messages(task: Task, step: int, results: list[str]) -> list[prompts.Message]:
    """The planner chat a plan of ``step`` is sampled from, ending on the user turn: 0 = the onetime prompt; s >= 1
    = the iterative turn s after the gold history (gold subgoals 1..s-1 with their executed ``results``, the task's
    ``outcome.gold_step_results``). The sample stage renders it into ``plans.prompt`` (the text DPO trains on) and
    the conversational pairs export writes it unrendered, so both read this one layout."""
    if step == 0:
        return prompts.planner_messages(task)
    return planner_turn_messages(task, task.gold_subgoals[:step - 1], results[:step - 1])


def planner_step_prompt(agent: Agent, task: Task, step: int, results: list[str]) -> str:
    """``planner_step_messages`` rendered with ``agent``'s chat template, ending where the plan starts."""
    return _render(agent, planner_step_messages(task, step, results))


def grounder_prompt_iterative(agent: Agent, task: Task, subgoals: list[str], actions: list[str],
                              results: list[str]) -> str:
    """The iterative grounder prompt for subgoal ``len(actions) + 1``."""
    messages = prompts.grounder_messages(task, subgoals[:len(actions) + 1], actions, "iterative", results)
    return _render(agent, messages)


def plan_subgoals(subgoals: list[str], text: str) -> list[str]:
    """The subgoals a grounder is shown for a sampled plan: its parsed subgoals, or (malformed) its raw text as the
    single subgoal, so a bad plan is still grounded and scored (typically badly) instead of vanishing."""
    return list(subgoals) or [text.strip() or "(empty plan)"]


def grounding_messages(task: Task, step: int, subgoals: list[str], results: list[str],
                       actions: str | None = None) -> list[dict[str, str]]:
    """The grounder chat for a plan of ``step``: 0 = a onetime plan; s >= 1 = the iterative subgoal s after the gold
    history (gold subgoals and actions 1..s-1, with their executed ``results``). With ``actions`` it ends on them
    as the assistant turn (an SFT record); without, on the user turn (a generation or scoring prompt)."""
    if step == 0:
        return prompts.grounder_messages(task, subgoals, None if actions is None else [actions])
    history = task.gold_subgoals[:step - 1] + list(subgoals[:1])
    done = task.gold_actions[:step - 1] + ([actions] if actions is not None else [])
    return prompts.grounder_messages(task, history, done, "iterative", results)


def grounding_pair(grounder: Agent, task: Task, step: int, subgoals: list[str],
                   results: list[str]) -> tuple[str, str]:
    """``(prompt, gold target)`` for one plan: what the score stage scores and the ground stage generates from."""
    prompt = _render(grounder, grounding_messages(task, step, subgoals, results))
    return prompt, task.actions_text if step == 0 else task.gold_actions[step - 1]


def read_plan(text: str) -> tuple[list[str], bool]:
    """``(subgoals, well_formed)``; malformed planner output gives ``([], False)``."""
    try:
        subgoals = [s.strip() for s in parse_subgoals(text.strip())]
    except ValueError:
        return [], False
    return subgoals, all(subgoals)
