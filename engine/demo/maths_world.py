"""Seeded maths word problems with gold subgoals in two styles and gold Lumos actions.

Each template is data: a question with slots, and a list of steps. A step is one arithmetic operation on slot
numbers or earlier results, with a *concrete* subgoal (names the operation and the quantities, the phrasing the
grounder is trained on) and a *vague* one (names neither). Answers are computed with exact fractions from the step
operations -- never by evaluating text -- and a test checks that the maths tools execute every gold action sequence
to the same answer.

Held-in templates produce ``train`` and ``held_in`` tasks; held-out templates produce ``held_out`` tasks only.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from fractions import Fraction

NAMES = ("Ava", "Ben", "Chloe", "Dev", "Elena", "Farid", "Grace", "Hugo", "Iris", "Jamal", "Kira", "Liam", "Maya",
         "Noah", "Olga", "Priya", "Quinn", "Rosa", "Sami", "Tara", "Uma", "Victor", "Wen", "Yusuf", "Zoe")
ITEMS = ("pens", "apples", "stickers", "marbles", "books", "cookies", "cards", "shells", "buttons", "stamps")
CONTAINERS = ("boxes", "bags", "packs", "crates", "jars")

OPS = {"add": "+", "sub": "-", "mul": "*", "div": "/"}


@dataclass(frozen=True)
class Step:
    op: str  # add | sub | mul | div
    left: str  # a slot name ("a") or an earlier step ("#1")
    right: str
    concrete: str  # subgoal naming the operation and quantities; {slots} and {#k} (earlier result) fill in
    vague: str  # the same goal without quantities or operation


@dataclass(frozen=True)
class MathTemplate:
    name: str
    question: str
    slots: dict[str, tuple[int, int]]  # slot -> inclusive integer range
    steps: tuple[Step, ...]
    held_out: bool = False


def _s(op: str, left: str, right: str, concrete: str, vague: str) -> Step:
    return Step(op, left, right, concrete, vague)


HELD_IN = (
    MathTemplate(
        "packs_give_away",
        "{name} buys {a} {box} of {item}. Each of the {box} holds {b} {item}. {name} gives {c} {item} to a friend. "
        "How many {item} does {name} have now?",
        {"a": (2, 9), "b": (3, 12), "c": (1, 9)},
        (
            _s("mul", "a", "b", "Multiply {a} {box} by {b} {item} each to get the total {item}.",
               "Find the number of {item}."),
            _s("sub", "#1", "c", "Subtract the {c} {item} given away from the total {item} in Subgoal 1.",
               "Find how many are left."),
        ),
    ),
    MathTemplate(
        "earn_spend",
        "{name} earns {a} dollars a day for {b} days and then spends {c} dollars on {item}. "
        "How many dollars does {name} have left?",
        {"a": (5, 20), "b": (2, 7), "c": (1, 30)},
        (
            _s("mul", "a", "b", "Multiply {a} dollars by {b} days to get the total earned.", "Find the money."),
            _s("sub", "#1", "c", "Subtract the {c} dollars spent from the total in Subgoal 1.", "Find what remains."),
        ),
    ),
    MathTemplate(
        "share_equally",
        "{name} has {a} {item} and finds {b} more. {name} shares them equally among {c} friends. "
        "How many {item} does each friend get?",
        {"a": (4, 40), "b": (2, 20), "c": (2, 6)},
        (
            _s("add", "a", "b", "Add the {a} {item} and the {b} more {item} to get the total.",
               "Find the total number."),
            _s("div", "#1", "c", "Divide the total {item} from Subgoal 1 by {c} friends.", "Find each share."),
        ),
    ),
    MathTemplate(
        "three_purchases",
        "{name} buys {a} {item} on Monday, {b} {item} on Tuesday and twice as many on Wednesday as on Tuesday. "
        "How many {item} did {name} buy in total?",
        {"a": (2, 30), "b": (2, 30)},
        (
            _s("mul", "b", "2", "Multiply the {b} {item} bought on Tuesday by 2 to get Wednesday's {item}.",
               "Find the amount for Wednesday."),
            _s("add", "a", "b", "Add the {a} {item} from Monday and the {b} {item} from Tuesday.",
               "Find the first two days."),
            _s("add", "#2", "#1", "Add the result of Subgoal 2 and the result of Subgoal 1 to get the total.",
               "Find the total."),
        ),
    ),
    MathTemplate(
        "rows_minus_broken",
        "A shop has {a} shelves with {b} {item} on each shelf. {c} {item} are broken and {d} are sold. "
        "How many {item} are left to sell?",
        {"a": (2, 9), "b": (4, 15), "c": (1, 5), "d": (1, 9)},
        (
            _s("mul", "a", "b", "Multiply {a} shelves by {b} {item} per shelf to get all the {item}.",
               "Find how many there are."),
            _s("sub", "#1", "c", "Subtract the {c} broken {item} from the result of Subgoal 1.",
               "Remove the broken ones."),
            _s("sub", "#2", "d", "Subtract the {d} sold {item} from the result of Subgoal 2.",
               "Find what is left."),
        ),
    ),
    MathTemplate(
        "price_total_change",
        "{name} buys {a} {item} at {b} dollars each and pays with {c} dollars. How much change does {name} get?",
        {"a": (2, 6), "b": (2, 9)},
        (
            _s("mul", "a", "b", "Multiply {a} {item} by {b} dollars each to get the cost.", "Find the cost."),
            _s("sub", "c", "#1", "Subtract the cost from Subgoal 1 from the {c} dollars paid.",
               "Find the change."),
        ),
    ),
    MathTemplate(
        "weekly_saving",
        "{name} saves {a} dollars every week for {b} weeks, gets a gift of {c} dollars, and splits all the money "
        "equally into {d} {box}. How many dollars go into each of the {box}?",
        {"a": (2, 12), "b": (2, 8), "c": (1, 20), "d": (2, 5)},
        (
            _s("mul", "a", "b", "Multiply {a} dollars by {b} weeks to get the savings.", "Find the savings."),
            _s("add", "#1", "c", "Add the {c} dollar gift to the savings from Subgoal 1.", "Include the gift."),
            _s("div", "#2", "d", "Divide the money from Subgoal 2 by {d} {box}.", "Find the amount in each."),
        ),
    ),
    MathTemplate(
        "two_friends_compare",
        "{name} has {a} {item}. {friend} has {b} times as many {item} as {name}. "
        "How many more {item} does {friend} have than {name}?",
        {"a": (2, 25), "b": (2, 6)},
        (
            _s("mul", "a", "b", "Multiply {name}'s {a} {item} by {b} to get {friend}'s {item}.",
               "Find how many {friend} has."),
            _s("sub", "#1", "a", "Subtract {name}'s {a} {item} from {friend}'s {item} in Subgoal 1.",
               "Find the difference."),
        ),
    ),
)

HELD_OUT = (
    MathTemplate(
        "trip_fuel",
        "A van drives {a} trips of {b} miles each, plus one extra trip of {c} miles. "
        "How many miles does the van drive in all?",
        {"a": (2, 9), "b": (5, 40), "c": (1, 30)},
        (
            _s("mul", "a", "b", "Multiply {a} trips by {b} miles each to get the miles of the trips.",
               "Find the distance of the trips."),
            _s("add", "#1", "c", "Add the {c} extra miles to the result of Subgoal 1.", "Find the total distance."),
        ),
        held_out=True,
    ),
    MathTemplate(
        "bake_sale",
        "At a bake sale {name} sells {a} trays of {item} with {b} {item} on each tray, eats {c} {item}, and packs "
        "the rest into bags of {d}. How many bags does {name} fill?",
        {"a": (2, 8), "b": (4, 12), "c": (1, 6), "d": (2, 5)},
        (
            _s("mul", "a", "b", "Multiply {a} trays by {b} {item} per tray to get all the {item}.",
               "Find all the {item}."),
            _s("sub", "#1", "c", "Subtract the {c} eaten {item} from the result of Subgoal 1.",
               "Remove the eaten ones."),
            _s("div", "#2", "d", "Divide the result of Subgoal 2 by {d} {item} per bag.", "Find the bags."),
        ),
        held_out=True,
    ),
    MathTemplate(
        "class_supplies",
        "A teacher has {a} {item} and buys {b} {box} with {c} {item} in each. She gives out {d} {item}. "
        "How many {item} does she have now?",
        {"a": (1, 30), "b": (2, 6), "c": (3, 10), "d": (1, 20)},
        (
            _s("mul", "b", "c", "Multiply {b} {box} by {c} {item} each to get the new {item}.",
               "Find the new ones."),
            _s("add", "a", "#1", "Add the {a} {item} she had to the new {item} from Subgoal 1.",
               "Find how many she has."),
            _s("sub", "#2", "d", "Subtract the {d} {item} given out from the result of Subgoal 2.",
               "Find what she has now."),
        ),
        held_out=True,
    ),
    MathTemplate(
        "garden_rows",
        "{name} plants {a} rows of {b} flowers and {c} rows of {d} flowers. How many flowers does {name} plant?",
        {"a": (2, 9), "b": (3, 12), "c": (2, 9), "d": (3, 12)},
        (
            _s("mul", "a", "b", "Multiply {a} rows by {b} flowers per row.", "Find the first flowers."),
            _s("mul", "c", "d", "Multiply {c} rows by {d} flowers per row.", "Find the other flowers."),
            _s("add", "#1", "#2", "Add the results of Subgoal 1 and Subgoal 2 to get all the flowers.",
               "Find the total."),
        ),
        held_out=True,
    ),
)


@dataclass
class MathProblem:
    template: str
    held_out: bool
    question: str
    concrete: list[str]
    vague: list[str]
    actions: list[str]
    answer: Fraction


def _operand_text(ref: str, slots: dict[str, int]) -> str:
    return f"R{ref[1:]}" if ref.startswith("#") else str(slots.get(ref, ref))


def _operand_value(ref: str, slots: dict[str, int], results: list[Fraction]) -> Fraction:
    if ref.startswith("#"):
        return results[int(ref[1:]) - 1]
    return Fraction(slots[ref]) if ref in slots else Fraction(int(ref))


def _apply(op: str, left: Fraction, right: Fraction) -> Fraction:
    if op == "add":
        return left + right
    if op == "sub":
        return left - right
    if op == "mul":
        return left * right
    return left / right


def _results(template: MathTemplate, slots: dict[str, int]) -> list[Fraction] | None:
    """Exact step results, or None when a step is negative or a division is not whole (re-draw the numbers)."""
    results: list[Fraction] = []
    for step in template.steps:
        left = _operand_value(step.left, slots, results)
        right = _operand_value(step.right, slots, results)
        value = _apply(step.op, left, right)
        if value < 0 or value.denominator != 1:
            return None
        results.append(value)
    return results


def _draw_slots(template: MathTemplate, rng: random.Random) -> dict[str, int]:
    slots = {k: rng.randint(lo, hi) for k, (lo, hi) in template.slots.items()}
    if template.name == "price_total_change":  # people pay with a round note
        slots["c"] = rng.choice((20, 50, 100))
    return slots


def make_problem(template: MathTemplate, rng: random.Random) -> MathProblem:
    """Draw names and numbers until every step result is a whole non-negative number."""
    for _ in range(1000):
        slots = _draw_slots(template, rng)
        results = _results(template, slots)
        if results is not None:
            break
    else:  # pragma: no cover - templates are designed to admit solutions
        raise RuntimeError(f"template {template.name} found no valid numbers")
    name, friend = rng.sample(NAMES, 2)
    words = {"name": name, "friend": friend, "item": rng.choice(ITEMS), "box": rng.choice(CONTAINERS), **slots}
    fill = {k: str(v) for k, v in words.items()}
    actions = []
    for k, step in enumerate(template.steps, start=1):
        left, right = _operand_text(step.left, slots), _operand_text(step.right, slots)
        actions.append(f"R{k} = Calculator({left} {OPS[step.op]} {right})")
    return MathProblem(
        template=template.name,
        held_out=template.held_out,
        question=template.question.format(**fill),
        concrete=[s.concrete.format(**fill) for s in template.steps],
        vague=[s.vague.format(**fill) for s in template.steps],
        actions=actions,
        answer=results[-1],
    )
