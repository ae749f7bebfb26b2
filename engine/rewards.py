"""Named, composable rewards for online group RL of the planner or the grounder (GRPO), and the book that records
every rollout.

A reward is a callable TRL's ``GRPOTrainer`` calls once per generation batch:
``reward(prompts, completions, task_id=[...], **kwargs) -> list[float]`` (one value per completion; its
``__name__`` is the name TRL logs it under, ``rewards/<name>/mean``). Each scores a *plan*, the planner's completion,
for the task named in the row's ``task_id`` column:

- ``gap``: minus the grounder's mean NLL of the task's gold actions (plus EOS) given the task and the plan: MOAT's
  stage-1 signal (``engine.stages.score`` stores the same number as ``logppl``), computed online for each rollout;
- ``execution``: 1 when the grounder's greedy actions for the plan execute to the task's gold answer, else 0;
- ``format``: 1 when the plan parses into at least one non-empty Lumos subgoal, else 0;
- ``overlong``: DAPO's soft overlong punishment (TRL's ``get_soft_overlong_punishment``): 0 up to
  ``max_completion_length - overlong_cache`` tokens, falling linearly to -1 at the limit.

The grounder's rewards (``stages.grounder_objective = grpo``; ``GROUNDER_REWARDS``) score its completion, an action
sequence, for the plan in the prompt: ``execution`` (``ActionExecutionReward``: 1 when the actions execute to the
gold answer), ``format`` (``ActionFormatReward``: 1 when every action parses) and ``overlong`` as above.

``RolloutBook`` wraps the rewards so that every rollout of a run is kept with each reward's value, the weighted
total and its group advantage, computed by ``group_advantages`` exactly as TRL's trainer computes it (weighted sum,
then normalised within each group of ``num_generations`` completions of one prompt; pinned against TRL's own
numbers in tests/test_grpo.py). A reward that is equal for every completion of a group gives those completions zero
advantage: it teaches nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from trl.trainer.utils import nanstd

from engine import generation, scoring
from engine.actions import parse_actions
from engine.outcome import Toolbox, is_solved, run_actions
from engine.tasks import Task
from engine.turns import Agent, grounder_prompt, plan_subgoals, read_plan

REWARDS = ("gap", "execution", "format", "overlong")
GROUNDER_REWARDS = ("execution", "format", "overlong")

# Grounds a batch of (task, subgoals) greedily and returns the action text for each: the grounder's own by default;
# tests pass a function that knows the right answer.
GroundFn = Callable[[list[Task], list[list[str]]], list[str]]


def _plan(text: str) -> list[str]:
    """A rollout's subgoals, as the score stage reads a sampled plan (malformed: the raw text as one subgoal)."""
    subgoals, _ = read_plan(text)
    return plan_subgoals(subgoals, text)


class GapReward:
    """Minus the grounder's mean NLL (natural log) of the gold actions given the plan: higher is better."""

    __name__ = "gap"

    def __init__(self, grounder: Agent, tasks: dict[str, Task], batch_size: int = 32):
        self.grounder, self.tasks, self.batch_size = grounder, tasks, batch_size

    def __call__(self, prompts: Sequence[str], completions: Sequence[str], task_id: Sequence[str],
                 **_: Any) -> list[float | None]:
        keep = [i for i, t in enumerate(task_id) if self.tasks[t].gold_actions]
        out: list[float | None] = [None] * len(completions)  # no gold actions: unscorable (TRL reads None as NaN)
        prompts_ = [grounder_prompt(self.grounder, self.tasks[task_id[i]], _plan(completions[i])) for i in keep]
        targets = [self.tasks[task_id[i]].actions_text for i in keep]
        values = scoring.score_targets(self.grounder.model, self.grounder.tokenizer, prompts_, targets,
                                       batch_size=self.batch_size)
        for i, value in zip(keep, values):
            out[i] = -float(value)
        return out


def grounder_actions(grounder: Agent, max_new_tokens: int = 160, batch_size: int = 32) -> GroundFn:
    """The grounder's greedy actions for each (task, subgoals), as the evaluation grounds a plan."""
    config = generation.GenerationConfig(max_new_tokens=max_new_tokens, temperature=0.0, batch_size=batch_size)

    def ground(tasks: list[Task], plans: list[list[str]]) -> list[str]:
        texts = [grounder_prompt(grounder, t, p) for t, p in zip(tasks, plans)]
        return [group[0] for group in generation.generate(grounder.model, grounder.tokenizer, texts, config)]

    return ground


class ExecutionReward:
    """1.0 when the grounded plan executes to the gold answer, else 0.0."""

    __name__ = "execution"

    def __init__(self, ground: GroundFn, tasks: dict[str, Task], toolbox: Toolbox | None = None):
        self.ground, self.tasks, self.toolbox = ground, tasks, toolbox

    def __call__(self, prompts: Sequence[str], completions: Sequence[str], task_id: Sequence[str],
                 **_: Any) -> list[float]:
        tasks = [self.tasks[t] for t in task_id]
        actions = self.ground(tasks, [_plan(c) for c in completions])
        return [float(is_solved(t, run_actions(t, a, self.toolbox))) for t, a in zip(tasks, actions)]


class FormatReward:
    """1.0 for a plan that parses into at least one non-empty subgoal, else 0.0."""

    __name__ = "format"

    def __call__(self, prompts: Sequence[str], completions: Sequence[str], **_: Any) -> list[float]:
        plans = [read_plan(c) for c in completions]
        return [float(well_formed and bool(subgoals)) for subgoals, well_formed in plans]


class ActionExecutionReward:
    """The grounder's completion executed with the task's tools: 1.0 when it reaches the gold answer, else 0.0."""

    __name__ = "execution"

    def __init__(self, tasks: dict[str, Task], toolbox: Toolbox | None = None):
        self.tasks, self.toolbox = tasks, toolbox

    def __call__(self, prompts: Sequence[str], completions: Sequence[str], task_id: Sequence[str],
                 **_: Any) -> list[float]:
        return [float(is_solved(self.tasks[t], run_actions(self.tasks[t], c, self.toolbox)))
                for t, c in zip(task_id, completions)]


class ActionFormatReward:
    """1.0 when every action of the grounder's completion parses (``R1 = Tool(args)``; ``engine.actions``)."""

    __name__ = "format"

    def __call__(self, prompts: Sequence[str], completions: Sequence[str], **_: Any) -> list[float]:
        return [float(parse_actions(c).ok) for c in completions]


def overlong_reward(max_completion_length: int, cache: int):
    """TRL's soft overlong punishment (DAPO), named ``overlong``."""
    from trl.rewards import get_soft_overlong_punishment

    reward = get_soft_overlong_punishment(max_completion_length, cache)
    reward.__name__ = "overlong"
    return reward


def group_advantages(totals: torch.Tensor, num_generations: int, scale: str = "group") -> torch.Tensor:
    """TRL's advantage of each completion (``GRPOTrainer``, ``multi_objective_aggregation = sum_then_normalize``):
    its weighted reward minus its group's mean, divided by the group's std (``scale = group``), the batch's
    (``batch``) or not at all (``none``); + 1e-4 as TRL adds. NaN totals (unscorable) get 0."""
    grouped = totals.view(-1, num_generations)
    mean = torch.nanmean(grouped, dim=1, keepdim=True)
    advantages = (grouped - mean).view(-1)
    if scale == "group":
        std = (nanstd(grouped, dim=1, keepdim=True).expand_as(grouped).reshape(-1) if num_generations > 1
               else torch.zeros_like(totals))
        advantages = advantages / (std + 1e-4)
    elif scale == "batch":
        std = nanstd(totals) if totals.numel() > 1 else torch.zeros(())
        advantages = advantages / (std + 1e-4)
    return torch.nan_to_num(advantages, nan=0.0)


@dataclass
class Rollout:
    """One completion of one prompt, as the trainer scored it."""

    batch: int  # generation batch (0, 1, ...): one per optimizer step here
    task_id: str
    n: int  # position within the batch
    prompt: str
    text: str
    rewards: dict[str, float | None]
    reward: float | None  # the weighted total (None: unscorable)
    advantage: float


@dataclass
class RolloutBook:
    """Wraps named rewards for TRL and keeps every rollout. Give TRL ``book.funcs`` and ``book.weights``."""

    rewards: list[Any]
    weights: list[float]
    num_generations: int
    scale: str = "group"
    rollouts: list[Rollout] = field(default_factory=list)
    _pending: dict[str, list[float | None]] = field(default_factory=dict)
    _batch: int = 0

    @property
    def funcs(self) -> list[Callable[..., list[float | None]]]:
        return [self._wrap(i, r) for i, r in enumerate(self.rewards)]

    def _wrap(self, index: int, reward: Any):
        # TRL calls the rewards of one batch in order; the last one closes the batch (totals, advantages, rows).
        def call(prompts, completions, **kwargs):
            values = list(reward(prompts=prompts, completions=completions, **kwargs))
            self._pending[reward.__name__] = values
            if index == len(self.rewards) - 1:
                self._close(prompts, completions, kwargs.get("task_id") or [""] * len(completions))
            return values

        call.__name__ = reward.__name__
        return call

    def _close(self, prompts: Sequence[str], completions: Sequence[str], task_ids: Sequence[str]) -> None:
        names = [r.__name__ for r in self.rewards]
        table = torch.tensor([[float("nan") if v is None else float(v) for v in self._pending[name]]
                              for name in names]).T
        weights = torch.tensor(self.weights, dtype=torch.float32)
        totals = (table * weights).nansum(dim=1)
        totals[torch.isnan(table).all(dim=1)] = float("nan")
        advantages = group_advantages(totals, self.num_generations, self.scale)
        for n, (prompt, text, task_id) in enumerate(zip(prompts, completions, task_ids)):
            total = float(totals[n])
            self.rollouts.append(Rollout(self._batch, str(task_id), n, str(prompt), str(text),
                                         {name: self._pending[name][n] for name in names},
                                         None if total != total else total, float(advantages[n])))
        self._pending = {}
        self._batch += 1
