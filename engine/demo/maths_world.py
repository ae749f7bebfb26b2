"""Seeded maths word problems composed from clauses, with concrete and vague subgoals and gold Lumos actions.

A problem is a sequence of clauses ("Ava has 3 boxes of pens with 12 pens in each.", "Ava gives 5 pens to a
friend.", ...). Each clause adds one or two arithmetic steps, and each step has a *concrete* subgoal (names the
operation and the quantities by their role: "Subtract the pens given away from the pens so far.") and a *vague*
one ("Update the count."). A clause sequence is a template; a seeded quarter of the templates is held out, so
held-out tasks are new combinations of familiar clauses (compositional generalisation, the way SVAMP relates to
GSM8K). Answers are computed with exact fractions from the step operations -- never by evaluating text -- and a
test executes every gold action sequence with the maths tools to the same answer.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from fractions import Fraction

NAMES = ("Ava", "Ben", "Chloe", "Dev", "Elena", "Farid", "Grace", "Hugo", "Iris", "Jamal", "Kira", "Liam", "Maya",
         "Noah", "Olga", "Priya", "Rosa", "Sami", "Tara", "Victor")
ITEMS = ("pens", "apples", "stickers", "marbles", "books", "cookies", "cards", "shells", "buttons", "stamps")
BOXES = ("boxes", "bags", "packs", "jars")
OPS = {"add": "+", "sub": "-", "mul": "*", "div": "/"}

# Clause code -> (sentence, [(op, left, right, concrete, vague)]). "cur" is the running quantity (a literal or the
# latest result), "new" the previous step's result inside the same clause; other operands are slot names.
CLAUSES: dict[str, tuple[str, list[tuple[str, str, str, str, str]]]] = {
    "boxes": ("{name} has {a} {box} of {item} with {b} {item} in each.",
              [("mul", "a", "b", "Multiply the {box} by the {item} in each to get the {item} {name} has.",
                "Find the {item}.")]),
    "plain": ("{name} has {a} {item}.", []),
    "gain": ("{name} finds {g} more {item}.",
             [("add", "cur", "g", "Add the {item} found to the {item} so far.", "Update the count.")]),
    "lose": ("{name} gives {l} {item} to a friend.",
             [("sub", "cur", "l", "Subtract the {item} given away from the {item} so far.", "Update the count.")]),
    "buy": ("{name} buys {c} {box} with {d} {item} in each.",
            [("mul", "c", "d", "Multiply the {box} bought by the {item} in each.", "Find the new ones."),
             ("add", "cur", "new", "Add the {item} bought to the {item} so far.", "Update the count.")]),
    "double": ("Then the number of {item} doubles.",
               [("mul", "cur", "2", "Multiply the {item} so far by 2.", "Update the count.")]),
    "share": ("{name} shares the {item} equally among {s} friends.",
              [("div", "cur", "s", "Divide the {item} so far by the number of friends.", "Find each share.")]),
}
SLOT_RANGES = {"a": (2, 9), "b": (2, 12), "g": (1, 9), "l": (1, 9), "c": (2, 5), "d": (2, 9), "s": (2, 5)}
QUESTIONS = {"share": "How many {item} does each friend get?", None: "How many {item} does {name} have now?"}


@dataclass(frozen=True)
class MathTemplate:
    clauses: tuple[str, ...]
    held_out: bool = False

    @property
    def name(self) -> str:
        return "-".join(self.clauses)

    @property
    def steps(self) -> int:
        return sum(len(CLAUSES[c][1]) for c in self.clauses)


def all_templates() -> list[MathTemplate]:
    """Every clause sequence: a start, 1-3 middle clauses (no repeats in a row), optionally a share; 2-5 steps."""
    out = []
    for start in ("boxes", "plain"):
        for n in (1, 2, 3):
            for middle in itertools.product(("gain", "lose", "buy", "double"), repeat=n):
                if any(x == y for x, y in zip(middle, middle[1:])):
                    continue
                for end in ((), ("share",)):
                    template = MathTemplate((start, *middle, *end))
                    if 2 <= template.steps <= 5:
                        out.append(template)
    return out


def split_templates(seed: int = 11, held_out_share: float = 0.25) -> tuple[list[MathTemplate], list[MathTemplate]]:
    """A seeded split of the templates into held-in and held-out (every clause type stays in held-in)."""
    templates = all_templates()
    rng = random.Random(seed)
    rng.shuffle(templates)
    cut = int(len(templates) * held_out_share)
    held_out = [MathTemplate(t.clauses, held_out=True) for t in templates[:cut]]
    held_in = templates[cut:]
    assert {c for t in held_in for c in t.clauses} == set(CLAUSES)
    return sorted(held_in, key=lambda t: t.name), sorted(held_out, key=lambda t: t.name)


@dataclass
class MathProblem:
    template: str
    held_out: bool
    question: str
    concrete: list[str]
    vague: list[str]
    actions: list[str]
    answer: Fraction


def _attempt(template: MathTemplate, rng: random.Random) -> MathProblem | None:
    words = {"name": rng.choice(NAMES), "item": rng.choice(ITEMS), "box": rng.choice(BOXES)}
    slots = {k: rng.randint(lo, hi) for k, (lo, hi) in SLOT_RANGES.items()}
    sentences, concrete, vague, actions = [], [], [], []
    cur_value, cur_text = Fraction(0), ""
    for clause in template.clauses:
        sentence, steps = CLAUSES[clause]
        sentences.append(sentence.format(**words, **slots))
        if clause == "plain":
            cur_value, cur_text = Fraction(slots["a"]), str(slots["a"])
        new_value, new_text = Fraction(0), ""
        for op, left, right, good, bad in steps:
            operands = []
            for ref in (left, right):
                if ref == "cur":
                    operands.append((cur_value, cur_text))
                elif ref == "new":
                    operands.append((new_value, new_text))
                elif ref in slots:
                    operands.append((Fraction(slots[ref]), str(slots[ref])))
                else:
                    operands.append((Fraction(int(ref)), ref))
            (lv, lt), (rv, rt) = operands
            value = {"add": lv + rv, "sub": lv - rv, "mul": lv * rv, "div": lv / rv if rv else Fraction(-1)}[op]
            if value < 0 or value.denominator != 1 or value > 10_000:
                return None  # re-draw: answers stay whole, non-negative and small
            var = f"R{len(actions) + 1}"
            actions.append(f"{var} = Calculator({lt} {OPS[op]} {rt})")
            concrete.append(good.format(**words))
            vague.append(bad.format(**words))
            new_value, new_text = value, var
        if steps:  # the clause's last result is the running quantity for the next clause
            cur_value, cur_text = new_value, new_text
    question = " ".join(sentences) + " " + QUESTIONS.get(template.clauses[-1], QUESTIONS[None]).format(**words)
    return MathProblem(template.name, template.held_out, question, concrete, vague, actions, cur_value)


def make_problem(template: MathTemplate, rng: random.Random) -> MathProblem:
    """Draw names and numbers until every step result is whole, non-negative and at most 10,000."""
    for _ in range(1000):
        problem = _attempt(template, rng)
        if problem is not None:
            return problem
    raise RuntimeError(f"template {template.name} found no valid numbers")  # pragma: no cover
