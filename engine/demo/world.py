"""The demo world: a seeded task suite (maths + QA) with a capability gap built into the agents' warm-start data.

``generate_suite(WorldConfig())`` returns the same ``Task`` list for the same config, byte for byte once written
with ``engine.tasks.write_tasks``; ``examples/demo/tasks.jsonl`` is that output for the default config.

Each task carries its gold *concrete* subgoals (``gold_subgoals``) and a *vague* rendering of the same plan
(``meta["vague_subgoals"]``). ``planner_warm_start`` mixes concrete, vague, mixed and flawed (reordered or
missing-step) plans for the planner; ``grounder_warm_start`` pairs only concrete plans with gold actions. That
mismatch is the capability gap the MOAT loop should close.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from engine.demo import maths_world, qa_world
from engine.tasks import Task


@dataclass(frozen=True)
class WorldConfig:
    seed: int = 7  # one seed drives every draw
    maths_train: int = 1200  # tasks per split and domain
    maths_held_in: int = 200
    maths_held_out: int = 200
    qa_train: int = 400
    qa_held_in: int = 100
    qa_held_out: int = 100


# Warm-start plan styles for the planner: the mix that makes its samples disagree with the grounder.
PLAN_STYLES = (("concrete", 0.40), ("vague", 0.30), ("mixed", 0.15), ("flawed", 0.15))


def _maths_tasks(rng: random.Random, split: str, count: int, templates, seen: set[str]) -> list[Task]:
    tasks: list[Task] = []
    while len(tasks) < count:
        problem = maths_world.make_problem(rng.choice(templates), rng)
        if problem.question in seen:
            continue
        seen.add(problem.question)
        tasks.append(Task(
            id=f"demo-maths-{split}-{len(tasks):04d}", domain="maths", source="demo:maths", split=split,
            question=problem.question, gold_subgoals=problem.concrete, gold_actions=problem.actions,
            answer=str(problem.answer),
            meta={"template": problem.template, "vague_subgoals": problem.vague},
        ))
    return tasks


def _qa_tasks(rng: random.Random, world: qa_world.FactWorld, split: str, count: int, makers,
              seen: set[str]) -> list[Task]:
    tasks: list[Task] = []
    while len(tasks) < count:
        problem = rng.choice(makers)(world, rng)
        if problem.question in seen:
            continue
        seen.add(problem.question)
        tasks.append(Task(
            id=f"demo-qa-{split}-{len(tasks):04d}", domain="qa", source="demo:qa", split=split,
            question=problem.question, context=qa_world.task_context(world, problem, rng),
            gold_subgoals=problem.concrete, gold_actions=problem.actions, answer=problem.answer,
            meta={"template": problem.template, "vague_subgoals": problem.vague},
        ))
    return tasks


def generate_suite(config: WorldConfig = WorldConfig()) -> list[Task]:
    """All demo tasks: held-in templates give train + held_in, held-out templates give held_out only."""
    rng = random.Random(config.seed)
    seen: set[str] = set()
    held_in, held_out = maths_world.split_templates()
    tasks = _maths_tasks(rng, "train", config.maths_train, held_in, seen)
    tasks += _maths_tasks(rng, "held_in", config.maths_held_in, held_in, seen)
    tasks += _maths_tasks(rng, "held_out", config.maths_held_out, held_out, seen)
    world = qa_world.build_world(rng)
    tasks += _qa_tasks(rng, world, "train", config.qa_train, qa_world.HELD_IN, seen)
    tasks += _qa_tasks(rng, world, "held_in", config.qa_held_in, qa_world.HELD_IN, seen)
    tasks += _qa_tasks(rng, world, "held_out", config.qa_held_out, qa_world.HELD_OUT, seen)
    return tasks


def _flawed(subgoals: list[str], rng: random.Random) -> list[str]:
    """A concrete plan with two subgoals swapped or one dropped (a planner's typical slip)."""
    plan = list(subgoals)
    if len(plan) < 2:
        return plan
    if len(plan) >= 3 and rng.random() < 0.5:
        del plan[rng.randrange(len(plan))]
    else:
        i = rng.randrange(len(plan) - 1)
        plan[i], plan[i + 1] = plan[i + 1], plan[i]
    return plan


def plan_in_style(task: Task, style: str, rng: random.Random) -> list[str]:
    concrete, vague = task.gold_subgoals, task.meta["vague_subgoals"]
    if style == "concrete":
        return list(concrete)
    if style == "vague":
        return list(vague)
    if style == "mixed":
        return [c if rng.random() < 0.5 else v for c, v in zip(concrete, vague)]
    return _flawed(concrete, rng)


def planner_warm_start(tasks: list[Task], seed: int, draws: int = 2) -> list[tuple[Task, list[str], str]]:
    """(task, subgoals, style) rows, ``draws`` per training task, styles drawn from ``PLAN_STYLES``.

    Several independent draws per task keep the planner from memorising one style per question: it has to learn
    the mixture, so its samples for the same task disagree -- which is what the PPL ranking needs.
    """
    rng = random.Random(seed)
    styles, weights = zip(*PLAN_STYLES)
    rows = []
    for task in tasks:
        for _ in range(draws):
            style = rng.choices(styles, weights)[0]
            rows.append((task, plan_in_style(task, style, rng), style))
    return rows


def grounder_warm_start(tasks: list[Task]) -> list[tuple[Task, list[str]]]:
    """(task, concrete subgoals) for each training task: the grounder only ever sees concrete plans."""
    return [(task, list(task.gold_subgoals)) for task in tasks]
