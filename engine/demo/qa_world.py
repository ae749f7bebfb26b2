"""Seeded one- and two-hop questions over invented facts, answered with the Lumos QA tools.

Every task gets its *own* small fact world: fresh invented names (people, cities, countries, rivers, companies),
so no model can answer from memory or memorise entities -- the grounder must copy names from the question, and
the facts live only in the task's context pages ("Title: sentence. sentence."). Each relation has its own keyword
in its fact sentence and its sub-question ("The mayor of Tressel is Dora Kel." / "Who is the mayor of Tressel?"),
so the offline tools (BM25 retrieval, extractive QA) execute the gold actions to the answer.

A template is a chain of relations (``born_in``, ``country_of``, ``river_of``, ``mayor_of``, ``founder_of``,
``year_of``, ``hq_of``) applied to a named entity -- one hop, or two where the second hop applies to the first
hop's answer (R3) -- plus a two-company comparison (``founding_gap``). The split is compositional: every relation
in every position of a dev or held-out chain (first or later hop; inner noun phrase or outer question of the
wording) also occurs in that position in a training chain, so dev and held-out tasks are new *combinations* of
familiar hops, solvable in principle.

Two worlds share this code (``WORLDS``, chosen by ``WorldConfig.qa_world``): ``narrow``, the committed demo's seven
relations and five training chains, where each hop of a dev or held-out chain occurs in its position in a single
training chain (``position_support``); and ``wide``, three more relations (``studied_in``, ``employed_by``,
``bank_of``) and every type-valid two-hop chain, with the same dev and held-out chains each of whose hops occurs in
two or more training chains. A world's tasks depend only on its own relations, so the narrow suite is unchanged.

Each hop has four plan renderings, as in the maths world: concrete ("Answer which river that city is on."),
explicit (the first hop names the entity: "Answer in which city Kalo Venu was born."), vague ("Look it up.") and
paraphrased, the planner's own wording: the concrete one for every relation but ``born_in``, which it words in a way
the grounder never saw ("Find the home town of that person.").
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

NAME_SYLLABLES = ("ka", "lo", "ve", "tri", "mon", "sa", "dor", "el", "bri", "nu", "ra", "ost", "fen", "qui", "zar",
                  "hal", "mer", "tu", "vin", "gor", "pel", "ash", "wyn", "cor")
JOBS = ("baker", "pilot", "painter", "chemist", "teacher", "sailor")


@dataclass(frozen=True)
class Relation:
    """One hop: subject type -> object type, its fact sentence, the question it answers, and plan renderings."""

    name: str
    subject: str  # person | city | company
    obj: str  # person | city | country | river | year
    fact: str  # "{s} was born in {o}."
    question: str  # "In which city was {s} born?"
    phrase: str  # the object as a noun phrase about {s}: "the city where {s} was born" ("" when never nested)
    concrete_first: str
    concrete_later: str
    explicit_first: str  # names the entity: "{s}"
    # The planner's own wording (first hop, later hop); empty where it is the concrete wording (the relations the two
    # agents' conventions share), a paraphrase the grounder never saw on the other (born_in).
    paraphrased_first: str = ""
    paraphrased_later: str = ""

    def paraphrased(self, first: bool) -> str:
        own = self.paraphrased_first if first else self.paraphrased_later
        return own or (self.concrete_first if first else self.concrete_later)


RELATIONS = {r.name: r for r in (
    Relation("born_in", "person", "city", "{s} was born in {o}.", "In which city was {s} born?",
             "the city where {s} was born", "Answer in which city the person was born.",
             "Answer in which city that person was born.", "Answer in which city {s} was born.",
             "Find the home town of the person.", "Find the home town of that person."),
    Relation("country_of", "city", "country", "{s} is located in {o}.", "Which country is {s} located in?", "",
             "Answer which country the city is located in.", "Answer which country that city is located in.",
             "Answer which country {s} is located in."),
    Relation("river_of", "city", "river", "{s} is on the river {o}.", "Which river is {s} on?", "",
             "Answer which river the city is on.", "Answer which river that city is on.",
             "Answer which river {s} is on."),
    Relation("mayor_of", "city", "person", "The mayor of {s} is {o}.", "Who is the mayor of {s}?",
             "the mayor of {s}", "Answer who the mayor of the city is.", "Answer who the mayor of that city is.",
             "Answer who the mayor of {s} is."),
    Relation("founder_of", "company", "person", "The founder of {s} is {o}.", "Who is the founder of {s}?",
             "the founder of {s}", "Answer who the founder of the company is.",
             "Answer who the founder of that company is.", "Answer who the founder of {s} is."),
    Relation("year_of", "company", "year", "{s} was founded in {o}.", "In which year was {s} founded?", "",
             "Answer in which year the company was founded.", "Answer in which year that company was founded.",
             "Answer in which year {s} was founded."),
    Relation("hq_of", "company", "city", "{s} is based in {o}.", "In which city is {s} based?",
             "the city where {s} is based", "Answer in which city the company is based.",
             "Answer in which city that company is based.", "Answer in which city {s} is based."),
)}
VAGUE_FIRST, VAGUE_LATER, VAGUE_CALC = "Look it up.", "Look up the next fact.", "Work out the answer."

# Two-hop chains (first relation's object type = second relation's subject type), named "<first>-<second>".
CHAINS_TWO = ("born_in-country_of", "born_in-river_of", "born_in-mayor_of", "hq_of-country_of", "hq_of-river_of",
              "hq_of-mayor_of", "mayor_of-born_in", "founder_of-born_in")
DEV_TEMPLATES = ("born_in-country_of",)
HELD_OUT_TEMPLATES = ("born_in-river_of", "hq_of-mayor_of")
GAP = "founding_gap"

# The wide world's three extra relations: a second person -> city hop, a person -> company hop and a city -> company
# hop, so that every relation of a dev or held-out chain occurs in its position in two or more training chains (the
# narrow world has one each: its held-out chains are compositions of hops each seen in a single chain).
EXTRA_RELATIONS = {r.name: r for r in (
    Relation("studied_in", "person", "city", "{s} studied in {o}.", "In which city has {s} studied?",
             "the city where {s} studied", "Answer in which city the person studied.",
             "Answer in which city that person studied.", "Answer in which city {s} studied."),
    Relation("employed_by", "person", "company", "{s} is employed by {o}.", "Which company is {s} employed by?",
             "the company that {s} is employed by", "Answer which company the person is employed by.",
             "Answer which company that person is employed by.", "Answer which company {s} is employed by."),
    Relation("bank_of", "city", "company", "The biggest bank in {s} is {o}.",
             "Which company is the biggest bank in {s}?", "the biggest bank in {s}",
             "Answer which company is the biggest bank in the city.",
             "Answer which company is the biggest bank in that city.",
             "Answer which company is the biggest bank in {s}."),
)}


@dataclass(frozen=True)
class QAWorld:
    """A QA world's vocabulary and split: its relations, its two-hop chains, and which chains are dev / held-out."""

    name: str
    relations: dict[str, Relation]
    chains: tuple[str, ...]
    dev: tuple[str, ...]
    held_out: tuple[str, ...]


def _all_chains(relations: dict[str, Relation]) -> tuple[str, ...]:
    """Every type-valid two-hop chain: the first hop's object is an entity with relations of its own."""
    return tuple(f"{a.name}-{b.name}" for a in relations.values() for b in relations.values()
                 if a.phrase and a.obj == b.subject)


NARROW = QAWorld("narrow", RELATIONS, CHAINS_TWO, DEV_TEMPLATES, HELD_OUT_TEMPLATES)
# The same dev and held-out chains as the narrow world; 21 training chains instead of 5.
WIDE = QAWorld("wide", {**RELATIONS, **EXTRA_RELATIONS}, _all_chains({**RELATIONS, **EXTRA_RELATIONS}),
               DEV_TEMPLATES, HELD_OUT_TEMPLATES)
WORLDS = {w.name: w for w in (NARROW, WIDE)}


def world_named(name: str) -> QAWorld:
    if name not in WORLDS:
        raise ValueError(f"QA world {name!r}: expected one of {', '.join(WORLDS)}")
    return WORLDS[name]


def all_templates(world: QAWorld = NARROW) -> list[str]:
    """Every QA template name: the one-hop relations, the two-hop chains and the founding-year comparison."""
    return [*world.relations, *world.chains, GAP]


def _positions(template: str) -> set[tuple[str, str]]:
    """What a template asks of the agents, hop by hop: each relation as the first hop (applied to a named entity)
    or a later one (applied to R3), and -- in the question's wording -- as the inner noun phrase ("the city where X
    was born") or the outer question ("Which river is ... on?") of a two-hop chain."""
    if template == GAP:
        return {("year_of", "first")}
    hops = template.split("-")
    out = {(hops[0], "first")} | {(h, "later") for h in hops[1:]}
    if len(hops) > 1:
        out |= {(h, "inner") for h in hops[:-1]} | {(hops[-1], "outer")}
    return out


def position_support(world: QAWorld = NARROW) -> dict[str, dict[tuple[str, str], int]]:
    """For each dev and held-out template, how many training templates ask each of its hop positions: 1 means the
    position was seen in a single context, which a tiny planner learns as part of that one chain."""
    held_in, dev, held_out = split_templates(world)
    return {t: {p: sum(p in _positions(u) for u in held_in) for p in sorted(_positions(t))} for t in dev + held_out}


def split_templates(world: QAWorld = NARROW) -> tuple[list[str], list[str], list[str]]:
    """(train/held-in, dev, held-out) template names; everything a dev or held-out template asks (``_positions``)
    is asked by some training template too, so those tasks are unseen but solvable by composition."""
    dev, held_out = list(world.dev), list(world.held_out)
    held_in = [t for t in all_templates(world) if t not in dev and t not in held_out]
    seen = set().union(*(_positions(t) for t in held_in))
    for t in dev + held_out:
        assert _positions(t) <= seen, f"{t} uses a hop position no training template has"
    return held_in, dev, held_out


@dataclass
class QAProblem:
    template: str
    held_out: bool
    question: str
    concrete: list[str]
    explicit: list[str]
    vague: list[str]
    actions: list[str]
    answer: str
    context: list[str] = field(default_factory=list)
    paraphrased: list[str] = field(default_factory=list)


class _Names:
    """Fresh invented names; within one task no word of a name is reused (a surname equal to a city's name would
    make the extractive QA tool's answer ambiguous)."""

    def __init__(self, rng: random.Random):
        self.rng, self.used = rng, set()

    def _word(self, parts: int) -> str:
        return "".join(self.rng.choice(NAME_SYLLABLES) for _ in range(parts)).capitalize()

    def make(self, kind: str) -> str:
        makers = {"person": lambda: f"{self._word(2)} {self._word(2)}", "city": lambda: self._word(2),
                  "country": lambda: self._word(2) + "ia", "river": lambda: self._word(1) + "r",
                  "company": lambda: self._word(2) + " Works", "year": lambda: str(self.rng.randint(1850, 2010))}
        while True:
            name = makers[kind]()
            words = set(name.removesuffix(" Works").split())
            if not words & self.used:
                self.used |= words
                return name


class _Facts:
    """A task's fact world: pages (title -> sentences) grown on demand, so every entity has a full page."""

    def __init__(self, rng: random.Random, relations: dict[str, Relation] = RELATIONS):
        self.rng, self.names, self.relations = rng, _Names(rng), relations
        self.pages: dict[str, list[str]] = {}
        self.kinds: dict[str, str] = {}
        self.values: dict[tuple[str, str], str] = {}

    def entity(self, kind: str) -> str:
        name = self.names.make(kind)
        self.kinds[name] = kind
        if kind == "person":
            self.pages[name] = [f"{name} works as a {self.rng.choice(JOBS)}."]
        elif kind in ("city", "company"):
            self.pages[name] = []
        return name

    def value(self, relation: str, subject: str) -> str:
        """The object of ``relation`` for ``subject``, created (with its fact sentence) on first use."""
        key = (relation, subject)
        if key not in self.values:
            rel = self.relations[relation]
            obj = self.entity(rel.obj)
            self.values[key] = obj
            self.pages[subject].append(rel.fact.format(s=subject, o=obj))
        return self.values[key]

    def complete(self, subject: str) -> None:
        """Give ``subject`` a fact for every relation of its type, so a page never gives away which relation the
        question uses."""
        for rel in self.relations.values():
            if rel.subject == self.kinds[subject]:
                self.value(rel.name, subject)

    def passage(self, title: str) -> str:
        sentences = list(self.pages[title])
        self.rng.shuffle(sentences)
        return f"{title}: {' '.join(sentences)}"


def _hop_actions(step: int, subject: str, question: str) -> str:
    """KnowledgeQuery + ParagraphRetrieve + QA for one hop, numbered from R{step}."""
    a, b, c = step, step + 1, step + 2
    return (f"R{a} = KnowledgeQuery({subject}); R{b} = ParagraphRetrieve(R{a}, Query: {question}); "
            f"R{c} = QA([R{b}], Question: {question})")


def _chain(template: str, held_out: bool, rng: random.Random, world: QAWorld = NARROW) -> QAProblem:
    hops = [world.relations[h] for h in template.split("-")]
    facts = _Facts(rng, world.relations)
    start = facts.entity(hops[0].subject)
    read, subject, value = [start], start, start
    actions, concrete, explicit, vague, paraphrased = [], [], [], [], []
    for i, rel in enumerate(hops):
        shown = subject if i == 0 else f"R{3 * i}"  # later hops ask about the previous hop's answer
        actions.append(_hop_actions(3 * i + 1, shown, rel.question.format(s=shown)))
        concrete.append(rel.concrete_first if i == 0 else rel.concrete_later)
        explicit.append(rel.explicit_first.format(s=subject) if i == 0 else rel.concrete_later)
        vague.append(VAGUE_FIRST if i == 0 else VAGUE_LATER)
        paraphrased.append(rel.paraphrased(i == 0))
        value = facts.value(rel.name, subject)
        if rel.obj in ("person", "city", "company"):
            read.append(value)
        subject = value
    for title in read[:len(hops)]:
        facts.complete(title)
    phrase = start
    for rel in hops[:-1]:
        phrase = rel.phrase.format(s=phrase)
    question = hops[-1].question.format(s=phrase)
    return QAProblem(template, held_out, question, concrete, explicit, vague, actions, value,
                     _context(facts, read[:len(hops)], rng), paraphrased)


def _founding_gap(held_out: bool, rng: random.Random, world: QAWorld = NARROW) -> QAProblem:
    facts = _Facts(rng, world.relations)
    first, second = facts.entity("company"), facts.entity("company")
    for company in (first, second):
        facts.complete(company)
    y1, y2 = int(facts.value("year_of", first)), int(facts.value("year_of", second))
    year_q = RELATIONS["year_of"].question
    concrete = ["Answer in which year the first company was founded.", "Answer in which year the second company was "
                "founded.", "Calculate the absolute difference between the two years."]
    return QAProblem(
        GAP, held_out, f"How many years apart were {first} and {second} founded?", concrete,
        [f"Answer in which year {first} was founded.", f"Answer in which year {second} was founded.",
         "Calculate the absolute difference between the two years."],
        [VAGUE_FIRST, "Look up the other one.", VAGUE_CALC],
        [_hop_actions(1, first, year_q.format(s=first)), _hop_actions(4, second, year_q.format(s=second)),
         "R7 = Calculator(abs(R3 - R6))"],
        str(abs(y1 - y2)), _context(facts, [first, second], rng), list(concrete))  # year_of: shared wording


def _context(facts: _Facts, read: list[str], rng: random.Random, distractors: int = 2) -> list[str]:
    """The pages the gold actions read plus distractor pages (a person and a city or company of the task's own
    world, with full pages), shuffled."""
    titles = list(dict.fromkeys(read))
    for kind in rng.sample(("person", "city", "company"), distractors):
        name = facts.entity(kind)
        facts.complete(name)
        titles.append(name)
    rng.shuffle(titles)
    return [facts.passage(t) for t in titles]


def make_problem(template: str, held_out: bool, rng: random.Random, world: QAWorld = NARROW) -> QAProblem:
    return _founding_gap(held_out, rng, world) if template == GAP else _chain(template, held_out, rng, world)
