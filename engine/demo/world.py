"""The demo world: a seeded task suite (maths + QA) with a capability gap built into the agents' warm-start data.

``generate_suite(WorldConfig())`` returns the same ``Task`` list for the same config, byte for byte once written
with ``engine.tasks.write_tasks``; ``examples/demo/tasks.jsonl`` is that output for the default config.

Splits: ``train`` and ``held_in`` share the training templates; ``dev`` and ``held_out`` each have templates of
their own that never occur in training (new combinations of familiar clauses or hops). ``dev`` is for tuning,
``held_out`` only for reporting. Tasks are drawn round-robin over shuffled templates, so every template of a split
is represented in it. ``WorldConfig.pool_maths``/``pool_qa`` add a pool of fresh training-template tasks after every
split (ids ``demo-<domain>-pool-NNNN``, split ``train``; examples/demo/pool.jsonl), for aligning agents on tasks their
warm start never saw.

Each task carries, per gold step, its concrete subgoal (``gold_subgoals``: the grounder's own wording), an explicit
one (``meta["explicit_subgoals"]``: the same with the quantities or the entity named), a vague one (``meta
["vague_subgoals"]``) and a paraphrased one (``meta["paraphrased_subgoals"]``: the planner's own wording -- the
grounder's words on most steps, a paraphrase the grounder never saw on maths ``share`` steps and QA ``born_in``
hops); ``meta["step_renderings"]`` lists all four per step for the reference critic (a plan made of them is sound; a
reordered or shortened one is not).

The capability gap: the planner's warm-start data (``PLAN_STYLES``) mixes paraphrased, vague, mixed and flawed plans
and never the grounder's wording of the paraphrased steps; the grounder's has only concrete plans. Stage 1 can move
the planner from vague and flawed plans to its paraphrased ones (which the starting grounder executes on every task
without a share step or a born_in hop); only stage 2 can teach the grounder the two paraphrases. ``FIRST_PLAN_STYLES``
is the mix of the first demo planner (concrete plans included: the planner could then write the grounder's wording
everywhere, stage 1 closed the gap alone and stage 2 had nothing to teach); the tokenizer is trained on rows of that
mix, so agents of any mix share token ids.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from engine.demo import maths_world, qa_world
from engine.tasks import Task


@dataclass(frozen=True)
class WorldConfig:
    seed: int = 7  # one seed drives every draw
    maths_train: int = 2400  # tasks per split and domain (many distinct training tasks: the tiny agents learn to
    # copy numbers and names instead of memorising them)
    maths_dev: int = 100
    maths_held_in: int = 150
    maths_held_out: int = 150
    qa_train: int = 1200
    qa_dev: int = 50
    qa_held_in: int = 75
    qa_held_out: int = 75
    distractor_percent: int = 20  # maths problems with a distractor clause (a number the answer does not use)
    # A pool of fresh training-template tasks, drawn after every split from the same seeded stream (so the splits
    # above are the same with or without it, and no pool question equals a suite question): split ``train``, ids
    # ``demo-<domain>-pool-NNNN``. Agents warm-started on the train split have never seen them: MOAT can align on
    # them with ``data.exclude_tasks`` listing the warm start's tasks (examples/experiments/tune-pool.toml).
    pool_maths: int = 0
    pool_qa: int = 0
    # Which QA world (engine.demo.qa_world.WORLDS): "narrow", the committed demo's 7 relations and 5 training chains,
    # or "wide", 10 relations and 21 training chains with the same dev and held-out chains, so each of their hops is
    # seen in two or more training chains (examples/experiments/tune-wide-qa.toml).
    qa_world: str = "narrow"

    @classmethod
    def small(cls, seed: int = 7) -> WorldConfig:
        """A few tasks per split and domain: tests and the benchmarks' tiny size."""
        return cls(seed=seed, maths_train=60, maths_dev=6, maths_held_in=12, maths_held_out=12, qa_train=30,
                   qa_dev=4, qa_held_in=6, qa_held_out=6)


# Warm-start plan styles for the planner: the mix that makes its samples disagree with the grounder. Chosen on the
# dev split (examples/experiments/tune-paraphrase.toml, seeds 1-4).
PLAN_STYLES = (("paraphrased", 0.35), ("vague", 0.35), ("mixed", 0.15), ("flawed", 0.15))
# The first demo planner's mix: the tokenizer's corpus (engine.demo.agents), so token ids do not depend on the mix.
FIRST_PLAN_STYLES = (("concrete", 0.25), ("explicit", 0.15), ("vague", 0.35), ("mixed", 0.10), ("flawed", 0.15))
RENDERINGS = ("concrete", "explicit", "vague", "paraphrased")
STYLE_NAMES = (*RENDERINGS, "mixed", "flawed")


def parse_plan_styles(text: str) -> tuple[tuple[str, float], ...]:
    """``"explicit=0.4,vague=0.35,mixed=0.1,flawed=0.15"`` -> ``(("explicit", 0.4), ...)``; a named error for an
    unknown style, a weight that is not a positive number, or a mix made only of ``mixed``/``flawed`` (they are
    built from the renderings the mix names)."""
    styles = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, sep, weight = part.partition("=")
        name = name.strip()
        if name not in STYLE_NAMES:
            raise ValueError(f"plan style {name!r} in {text!r}: expected one of {', '.join(STYLE_NAMES)}")
        try:
            value = float(weight) if sep else float("nan")
        except ValueError:
            value = float("nan")
        if not value > 0:
            raise ValueError(f"plan style {part!r} in {text!r}: expected {name}=<positive weight>")
        styles.append((name, value))
    if not any(name in RENDERINGS for name, _ in styles):
        raise ValueError(f"plan styles {text!r}: name at least one rendering ({', '.join(RENDERINGS)})")
    return tuple(styles)


def format_plan_styles(styles: tuple[tuple[str, float], ...] = PLAN_STYLES) -> str:
    return ",".join(f"{name}={weight:g}" for name, weight in styles)


def _task(domain: str, split: str, index: int, problem, answer: str, context: list[str] | None = None,
          tag: str = "") -> Task:
    renderings = [list(r) for r in zip(problem.concrete, problem.explicit, problem.vague, problem.paraphrased)]
    return Task(
        id=f"demo-{domain}-{tag or split}-{index:04d}", domain=domain, source=f"demo:{domain}", split=split,
        question=problem.question, context=context or [], gold_subgoals=problem.concrete,
        gold_actions=problem.actions, answer=answer,
        meta={"template": problem.template, "explicit_subgoals": problem.explicit,
              "vague_subgoals": problem.vague, "paraphrased_subgoals": problem.paraphrased,
              "step_renderings": renderings},
    )


def _round_robin(templates: list, count: int, rng: random.Random) -> list:
    """``count`` templates cycling through a shuffled order: every template appears before any repeats."""
    out: list = []
    while len(out) < count:
        order = list(templates)
        rng.shuffle(order)
        out += order
    return out[:count]


def _maths_tasks(rng: random.Random, split: str, count: int, templates, seen: set[str],
                 distractor_share: float, tag: str = "") -> list[Task]:
    tasks: list[Task] = []
    for template in _round_robin(templates, count, rng):
        while True:
            problem = maths_world.make_problem(template, rng, distractor_share)
            if problem.question not in seen:
                break
        seen.add(problem.question)
        tasks.append(_task("maths", split, len(tasks), problem, str(problem.answer), tag=tag))
    return tasks


def _qa_tasks(rng: random.Random, split: str, count: int, templates: list[str], seen: set[str],
              tag: str = "", world: qa_world.QAWorld = qa_world.NARROW) -> list[Task]:
    tasks: list[Task] = []
    for template in _round_robin(templates, count, rng):
        while True:
            problem = qa_world.make_problem(template, split == "held_out", rng, world)
            if problem.question not in seen:
                break
        seen.add(problem.question)
        tasks.append(_task("qa", split, len(tasks), problem, problem.answer, problem.context, tag=tag))
    return tasks


def generate_suite(config: WorldConfig = WorldConfig()) -> list[Task]:
    """All demo tasks: training templates give train + held_in, dev and held-out templates their own split."""
    rng = random.Random(config.seed)
    seen: set[str] = set()
    m_in, m_dev, m_out = maths_world.split_templates()
    share = config.distractor_percent / 100
    tasks = _maths_tasks(rng, "train", config.maths_train, m_in, seen, share)
    tasks += _maths_tasks(rng, "dev", config.maths_dev, m_dev, seen, share)
    tasks += _maths_tasks(rng, "held_in", config.maths_held_in, m_in, seen, share)
    tasks += _maths_tasks(rng, "held_out", config.maths_held_out, m_out, seen, share)
    world = qa_world.world_named(config.qa_world)
    q_in, q_dev, q_out = qa_world.split_templates(world)
    tasks += _qa_tasks(rng, "train", config.qa_train, q_in, seen, world=world)
    tasks += _qa_tasks(rng, "dev", config.qa_dev, q_dev, seen, world=world)
    tasks += _qa_tasks(rng, "held_in", config.qa_held_in, q_in, seen, world=world)
    tasks += _qa_tasks(rng, "held_out", config.qa_held_out, q_out, seen, world=world)
    # the pool last: drawing it never changes a split above
    tasks += _maths_tasks(rng, "train", config.pool_maths, m_in, seen, share, tag="pool")
    tasks += _qa_tasks(rng, "train", config.pool_qa, q_in, seen, tag="pool", world=world)
    return tasks


def is_pool_task(task: Task) -> bool:
    """Whether ``task`` is one of the pool's (``WorldConfig.pool_maths``/``pool_qa``), told by its id."""
    return task.id.startswith(f"demo-{task.domain}-pool-")


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


def plan_in_style(task: Task, style: str, rng: random.Random,
                  renderings: tuple[str, ...] = RENDERINGS) -> list[str]:
    """The task's plan rendered in ``style``: concrete | explicit | vague | mixed (each step any of
    ``renderings``) | flawed (the first non-vague of ``renderings``, two steps swapped or one dropped)."""
    steps = task.meta["step_renderings"]
    if style in RENDERINGS:
        return [r[RENDERINGS.index(style)] for r in steps]
    if style == "mixed":
        return [r[RENDERINGS.index(rng.choice(renderings))] for r in steps]
    base = next((name for name in renderings if name != "vague"), "vague")
    return _flawed([r[RENDERINGS.index(base)] for r in steps], rng)


def planner_warm_start(tasks: list[Task], seed: int, draws: int = 2,
                       styles: tuple[tuple[str, float], ...] = PLAN_STYLES) -> list[tuple[Task, list[str], str]]:
    """(task, subgoals, style) rows, ``draws`` per training task, styles drawn from ``styles`` (default
    ``PLAN_STYLES``); ``mixed`` and ``flawed`` plans are built from the renderings ``styles`` names.

    Several independent draws per task keep the planner from memorising one style per question: it has to learn
    the mixture, so its samples for the same task disagree -- which is what the PPL ranking needs.
    """
    rng = random.Random(seed)
    names, weights = zip(*styles)
    renderings = tuple(name for name in RENDERINGS if name in names)
    rows = []
    for task in tasks:
        for _ in range(draws):
            style = rng.choices(names, weights)[0]
            rows.append((task, plan_in_style(task, style, rng, renderings), style))
    return rows


def grounder_warm_start(tasks: list[Task]) -> list[tuple[Task, list[str]]]:
    """(task, concrete subgoals) for each training task: the grounder only ever sees concrete plans."""
    return [(task, list(task.gold_subgoals)) for task in tasks]
