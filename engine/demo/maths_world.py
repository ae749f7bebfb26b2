"""Seeded maths word problems composed from clauses, with concrete and vague subgoals and gold Lumos actions.

A problem is a sequence of clauses ("Ava has 3 boxes of pens with 12 pens in each.", "Ava gives 5 pens to a
friend.", ...). Each clause adds one or two arithmetic steps, and each step has four renderings: *concrete* (the
grounder's wording: names the operation and the quantities by their role: "Subtract the pens given away from the pens
so far."), *explicit* (the same with the literal numbers: "Subtract the 5 pens given away from the pens so far."),
*vague* ("Update the count.") and *paraphrased* (the planner's own wording: the concrete one, except on share steps:
"Split the pens evenly between the friends."). A share of the problems also carries a *distractor* clause: a
number the answer does not use ("Ava also has 4 shells.", "Ben has 6 pens."), so a plan that names the quantities
really helps the grounder.

A clause sequence is a template; a seeded quarter of the templates is held out and a further share (of the rest)
is kept for a dev split, so held-out and dev tasks are new combinations of familiar clauses (compositional
generalisation, the way SVAMP relates to GSM8K). Answers are computed with exact fractions from the step
operations -- never by evaluating text -- and a test executes every gold action sequence with the maths tools to
the same answer.
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

# Clause code -> (sentence, [(op, left, right, concrete, explicit, vague, paraphrased)]). "cur" is the running quantity
# (a literal or the latest result), "new" the previous step's result inside the same clause; other operands are slot
# names. ``paraphrased`` is the planner's own wording of the step: None where it is the grounder's concrete wording
# (the clauses the two agents' conventions share), a paraphrase the grounder never saw on the other (share): as
# informative as the concrete wording, but in other words.
CLAUSES: dict[str, tuple[str, list[tuple[str, str, str, str, str, str, str | None]]]] = {
    "boxes": ("{name} has {a} {box} of {item} with {b} {item} in each.",
              [("mul", "a", "b", "Multiply the {box} by the {item} in each to get the {item} {name} has.",
                "Multiply the {a} {box} by the {b} {item} in each to get the {item} {name} has.",
                "Find the {item}.", None)]),
    "plain": ("{name} has {a} {item}.", []),
    "gain": ("{name} finds {g} more {item}.",
             [("add", "cur", "g", "Add the {item} found to the {item} so far.",
               "Add the {g} {item} found to the {item} so far.", "Update the count.", None)]),
    "lose": ("{name} gives {l} {item} to a friend.",
             [("sub", "cur", "l", "Subtract the {item} given away from the {item} so far.",
               "Subtract the {l} {item} given away from the {item} so far.", "Update the count.", None)]),
    "buy": ("{name} buys {c} {box} with {d} {item} in each.",
            [("mul", "c", "d", "Multiply the {box} bought by the {item} in each.",
              "Multiply the {c} {box} bought by the {d} {item} in each.", "Find the new ones.", None),
             ("add", "cur", "new", "Add the {item} bought to the {item} so far.",
              "Add the {item} bought to the {item} so far.", "Update the count.", None)]),
    "double": ("Then {name} doubles the number of {item}.",
               [("mul", "cur", "2", "Multiply the {item} so far by 2.", "Multiply the {item} so far by 2.",
                 "Update the count.", None)]),
    "share": ("{name} shares the {item} equally among {s} friends.",
              [("div", "cur", "s", "Divide the {item} so far by the number of friends.",
                "Divide the {item} so far by the {s} friends.", "Find each share.",
                "Split the {item} evenly between the friends.")]),
}
# Distractor sentences: a quantity the question never asks about (another item of the same person, or another
# person's items), inserted after the first clause of a share of the problems (``make_problem``'s argument).
DISTRACTORS = ("{name} also has {x} {other_item}.", "{other} has {x} {item}.")
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


def split_templates(seed: int = 11, held_out_share: float = 0.25,
                    dev_share: float = 0.1) -> tuple[list[MathTemplate], list[MathTemplate], list[MathTemplate]]:
    """A seeded split of the templates into held-in (train and held-in tasks), dev and held-out; every clause type
    stays in held-in, so dev and held-out tasks are new combinations of clauses the agents were trained on."""
    templates = all_templates()
    rng = random.Random(seed)
    rng.shuffle(templates)
    cut = int(len(templates) * held_out_share)
    held_out = [MathTemplate(t.clauses, held_out=True) for t in templates[:cut]]
    rest = templates[cut:]
    dev_cut = int(len(rest) * dev_share)
    dev, held_in = rest[:dev_cut], rest[dev_cut:]
    assert {c for t in held_in for c in t.clauses} == set(CLAUSES)
    by_name = lambda t: t.name  # noqa: E731
    return sorted(held_in, key=by_name), sorted(dev, key=by_name), sorted(held_out, key=by_name)


@dataclass
class MathProblem:
    template: str
    held_out: bool
    question: str
    concrete: list[str]
    explicit: list[str]
    vague: list[str]
    actions: list[str]
    answer: Fraction
    paraphrased: list[str]


def _attempt(template: MathTemplate, rng: random.Random, distractor_share: float) -> MathProblem | None:
    name, other = rng.sample(NAMES, 2)
    item, other_item = rng.sample(ITEMS, 2)
    words = {"name": name, "item": item, "box": rng.choice(BOXES), "other": other, "other_item": other_item}
    slots = {k: rng.randint(lo, hi) for k, (lo, hi) in SLOT_RANGES.items()}
    sentences, concrete, explicit, vague, paraphrased, actions = [], [], [], [], [], []
    cur_value, cur_text = Fraction(0), ""
    for clause in template.clauses:
        sentence, steps = CLAUSES[clause]
        sentences.append(sentence.format(**words, **slots))
        if clause == "plain":
            cur_value, cur_text = Fraction(slots["a"]), str(slots["a"])
        new_value, new_text = Fraction(0), ""
        for op, left, right, good, exact, bad, own in steps:
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
            explicit.append(exact.format(**words, **slots))
            vague.append(bad.format(**words))
            paraphrased.append((own or good).format(**words))
            new_value, new_text = value, var
        if steps:  # the clause's last result is the running quantity for the next clause
            cur_value, cur_text = new_value, new_text
    if rng.random() < distractor_share:
        distractor = rng.choice(DISTRACTORS).format(**words, x=rng.randint(2, 9))
        sentences.insert(rng.randint(1, len(sentences)), distractor)
    question = " ".join(sentences) + " " + QUESTIONS.get(template.clauses[-1], QUESTIONS[None]).format(**words)
    return MathProblem(template.name, template.held_out, question, concrete, explicit, vague, actions, cur_value,
                       paraphrased)


def make_problem(template: MathTemplate, rng: random.Random, distractor_share: float = 0.0) -> MathProblem:
    """Draw names and numbers until every step result is whole, non-negative and at most 10,000."""
    for _ in range(1000):
        problem = _attempt(template, rng, distractor_share)
        if problem is not None:
            return problem
    raise RuntimeError(f"template {template.name} found no valid numbers")  # pragma: no cover
