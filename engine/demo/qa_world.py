"""A seeded fictional fact world and two-hop questions over it, with Lumos QA actions.

Entities (people, cities, companies) get invented names, so no model can answer from world knowledge: the facts
live only in the corpus pages ("Title: sentence. sentence."), which become each task's ``context``. Every fact
sentence ends with its object ("Alma Varden was born in Tressel."), and every question repeats the sentence's
relation words, so the offline tools (BM25 retrieval, extractive QA) can execute the gold actions to the answer.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

_SYLLABLES = ("ka", "lo", "ve", "tri", "mon", "sa", "dor", "el", "bri", "nu", "ra", "ost", "fen", "qui", "zar",
              "hal", "mer", "tu", "vin", "gor", "pel", "ash", "wyn", "cor")


def _word(rng: random.Random, parts: int) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(parts)).capitalize()


@dataclass
class FactWorld:
    """Invented entities and their facts; ``pages`` maps a title to its sentences."""

    people: list[str] = field(default_factory=list)
    cities: list[str] = field(default_factory=list)
    companies: list[str] = field(default_factory=list)
    born_in: dict[str, str] = field(default_factory=dict)  # person -> city
    country_of: dict[str, str] = field(default_factory=dict)  # city -> country
    river_of: dict[str, str] = field(default_factory=dict)  # city -> river
    founded_year: dict[str, int] = field(default_factory=dict)  # company -> year
    founder_of: dict[str, str] = field(default_factory=dict)  # company -> person
    pages: dict[str, list[str]] = field(default_factory=dict)

    def passage(self, title: str) -> str:
        return f"{title}: {' '.join(self.pages[title])}"


def build_world(rng: random.Random, n_people: int = 60, n_cities: int = 24, n_companies: int = 40) -> FactWorld:
    names: set[str] = set()

    def fresh(make) -> str:
        while True:
            candidate = make()
            if candidate not in names:
                names.add(candidate)
                return candidate

    world = FactWorld()
    countries = [fresh(lambda: _word(rng, 2) + "ia") for _ in range(6)]
    rivers = [fresh(lambda: _word(rng, 1) + "r") for _ in range(10)]
    world.cities = [fresh(lambda: _word(rng, 2)) for _ in range(n_cities)]
    world.people = [fresh(lambda: f"{_word(rng, 2)} {_word(rng, 2)}") for _ in range(n_people)]
    world.companies = [fresh(lambda: _word(rng, 2) + " Works") for _ in range(n_companies)]
    for city in world.cities:
        world.country_of[city] = rng.choice(countries)
        world.river_of[city] = rng.choice(rivers)
        world.pages[city] = [f"{city} is located in {world.country_of[city]}.",
                             f"{city} is on the river {world.river_of[city]}."]
    for person in world.people:
        world.born_in[person] = rng.choice(world.cities)
        world.pages[person] = [f"{person} was born in {world.born_in[person]}.",
                               f"{person} worked as a {rng.choice(('baker', 'pilot', 'painter', 'chemist'))}."]
    for company in world.companies:
        world.founded_year[company] = rng.randint(1850, 2010)
        world.founder_of[company] = rng.choice(world.people)
        world.pages[company] = [f"{company} was founded in {world.founded_year[company]}.",
                                f"{company} was founded by {world.founder_of[company]}."]
    return world


@dataclass
class QAProblem:
    template: str
    held_out: bool
    question: str
    concrete: list[str]
    vague: list[str]
    actions: list[str]
    answer: str
    pages: list[str]  # titles of the pages the gold actions read


def _lookup(step: int, entity: str, question: str) -> str:
    """KnowledgeQuery + ParagraphRetrieve + QA for one hop, numbered from R{step}."""
    a, b, c = step, step + 1, step + 2
    return (f"R{a} = KnowledgeQuery({entity}); R{b} = ParagraphRetrieve(R{a}, Query: {question}); "
            f"R{c} = QA([R{b}], Question: {question})")


def _person_country(world: FactWorld, rng: random.Random) -> QAProblem:
    person = rng.choice(world.people)
    city = world.born_in[person]
    return QAProblem(
        "person_country", False, f"In which country was {person} born?",
        ["Answer in which city the person was born.", "Answer which country that city is located in."],
        ["Look it up.", "Look up the next fact."],
        [_lookup(1, person, f"In which city was {person} born?"),
         _lookup(4, "R3", "Which country is R3 located in?")],
        world.country_of[city], [person, city])


def _founder_city(world: FactWorld, rng: random.Random) -> QAProblem:
    company = rng.choice(world.companies)
    founder = world.founder_of[company]
    return QAProblem(
        "founder_city", False, f"In which city was the founder of {company} born?",
        ["Answer who the company was founded by.", "Answer in which city that person was born."],
        ["Look it up.", "Look up the next fact."],
        [_lookup(1, company, f"Who was {company} founded by?"),
         _lookup(4, "R3", "In which city was R3 born?")],
        world.born_in[founder], [company, founder])


def _city_river(world: FactWorld, rng: random.Random) -> QAProblem:
    city = rng.choice(world.cities)
    return QAProblem(
        "city_river", False, f"Which river is {city} on?",
        ["Answer which river the city is on."],
        ["Look it up."],
        [_lookup(1, city, f"Which river is {city} on?")],
        world.river_of[city], [city])


def _founding_gap(world: FactWorld, rng: random.Random) -> QAProblem:
    first, second = rng.sample(world.companies, 2)
    y1, y2 = world.founded_year[first], world.founded_year[second]
    return QAProblem(
        "founding_gap", False, f"How many years apart were {first} and {second} founded?",
        ["Answer in which year the first company was founded.", "Answer in which year the second company was "
         "founded.", "Calculate the absolute difference between the two years."],
        ["Look it up.", "Look up the other one.", "Work out the answer."],
        [_lookup(1, first, f"In which year was {first} founded?"),
         _lookup(4, second, f"In which year was {second} founded?"),
         "R7 = Calculator(abs(R3 - R6))"],
        str(abs(y1 - y2)), [first, second])


def _person_river(world: FactWorld, rng: random.Random) -> QAProblem:
    person = rng.choice(world.people)
    city = world.born_in[person]
    return QAProblem(
        "person_river", True, f"Which river is the city where {person} was born on?",
        ["Answer in which city the person was born.", "Answer which river that city is on."],
        ["Look it up.", "Look up the next fact."],
        [_lookup(1, person, f"In which city was {person} born?"),
         _lookup(4, "R3", "Which river is R3 on?")],
        world.river_of[city], [person, city])


def _founder_country(world: FactWorld, rng: random.Random) -> QAProblem:
    company = rng.choice(world.companies)
    founder = world.founder_of[company]
    city = world.born_in[founder]
    return QAProblem(
        "founder_country", True, f"In which country was the founder of {company} born?",
        ["Answer who the company was founded by.", "Answer in which city that person was born.",
         "Answer which country that city is located in."],
        ["Look it up.", "Look up the next fact.", "Look up the next fact."],
        [_lookup(1, company, f"Who was {company} founded by?"),
         _lookup(4, "R3", "In which city was R3 born?"),
         _lookup(7, "R6", "Which country is R6 located in?")],
        world.country_of[city], [company, founder, city])


HELD_IN = (_person_country, _founder_city, _city_river, _founding_gap)
HELD_OUT = (_person_river, _founder_country)


def task_context(world: FactWorld, problem: QAProblem, rng: random.Random, distractors: int = 2) -> list[str]:
    """The pages the gold actions need plus a few distractor pages, in a shuffled order."""
    titles = list(problem.pages)
    others = [t for t in world.pages if t not in titles]
    titles += rng.sample(others, distractors)
    rng.shuffle(titles)
    return [world.passage(t) for t in titles]
