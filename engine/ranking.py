"""Ranking a task-step's sampled plans by the grounder's log-PPL: the one rule the pairs and ground stages share.

``distinct`` keeps one candidate per distinct plan text (the lowest k stands for its duplicates) sorted best first
(lowest log-PPL, then lowest k); ``select`` picks the plans stage 2 grounds and the critic judges: ``best`` (the
paper's choice), the ``top_n`` best, ``best_worst`` (the lowest- and the highest-PPL distinct plan: the two ends of the
capability gap, the plans a best-worst DPO pair is made of) or ``all`` distinct plans.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Candidate:
    k: int
    text: str
    logppl: float


def distinct(candidates: list[Candidate]) -> list[Candidate]:
    """One candidate per distinct (stripped) text, the lowest k, sorted best first."""
    by_text: dict[str, Candidate] = {}
    for c in sorted(candidates, key=lambda c: c.k):
        by_text.setdefault(c.text.strip(), c)
    return sorted(by_text.values(), key=lambda c: (c.logppl, c.k))


def select(candidates: list[Candidate], which: str, top_n: int = 1) -> list[Candidate]:
    """The plans to ground and judge: ``best`` | ``top_n`` | ``best_worst`` | ``all`` of the distinct candidates,
    best first."""
    ranked = distinct(candidates)
    if which == "best":
        return ranked[:1]
    if which == "top_n":
        return ranked[:top_n]
    if which == "best_worst":
        # The worst plan is where the grounder is weakest on what its planner really writes: the data stage 2 needs.
        return ranked[:1] + ranked[1:][-1:]
    if which == "all":
        return ranked
    raise ValueError(f"unknown plan selection {which!r} (best | top_n | best_worst | all)")
