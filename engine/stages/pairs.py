"""Stage ``pairs``: turn scored plans into DPO preference pairs, per task (or per planning step).

Rules (``pairs.rule``): ``best_worst`` (paper): chosen = lowest log-PPL, rejected = highest; ``all_above_gap``:
every pair whose log-PPL gap reaches the threshold; ``top_bottom_k``: each of the k best against each of the k
worst. A pair is kept only when rejected - chosen >= ``min_gap``. Identical plan texts are merged first (the
lowest k stands for them) and equal scores never pair, so a tie or a duplicate is never a preference.
The stage replaces the iteration's *auto* pairs; human overrides live in their own table and apply on top.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from engine.ranking import Candidate, distinct
from engine.stages.context import StageContext

__all__ = ["Candidate", "Pair", "build_pairs", "run"]


@dataclass(frozen=True)
class Pair:
    chosen: Candidate
    rejected: Candidate

    @property
    def margin(self) -> float:
        return self.rejected.logppl - self.chosen.logppl


def build_pairs(candidates: list[Candidate], rule: str = "best_worst", min_gap: float = 0.1,
                top_k: int = 2) -> list[Pair]:
    ranked = distinct(candidates)
    if len(ranked) < 2:
        return []
    if rule == "best_worst":
        options = [Pair(ranked[0], ranked[-1])]
    elif rule == "all_above_gap":
        options = [Pair(a, b) for a, b in itertools.combinations(ranked, 2)]
    elif rule == "top_bottom_k":
        n = min(top_k, len(ranked) // 2)
        options = [Pair(a, b) for a in ranked[:n] for b in ranked[-n:]]
    else:
        raise ValueError(f"unknown pair rule {rule!r}")
    # ">" as well as ">= min_gap": a zero threshold must still never pair two equal scores.
    return [p for p in options if p.margin > 0 and p.margin >= min_gap]


def run(ctx: StageContext) -> dict[str, int]:
    cfg = ctx.config.pairs
    scored = ctx.store.query(
        "SELECT p.task_id, p.step, p.k, p.text, s.logppl FROM plans p JOIN scores s USING "
        "(run_id, iteration, task_id, step, k) WHERE p.run_id = ? AND p.iteration = ? ORDER BY p.task_id, p.step, "
        "p.k", [ctx.run_id, ctx.iteration])
    rows = []
    groups = scored.groupby(["task_id", "step"], sort=True)
    for (task_id, step), group in groups:
        candidates = [Candidate(int(r.k), r.text, float(r.logppl)) for r in group.itertuples(index=False)]
        for idx, pair in enumerate(build_pairs(candidates, cfg.rule, cfg.min_gap, cfg.top_k)):
            rows.append({"run_id": ctx.run_id, "iteration": ctx.iteration, "task_id": task_id, "step": int(step),
                         "pair_idx": idx, "chosen_k": pair.chosen.k, "rejected_k": pair.rejected.k,
                         "chosen_logppl": pair.chosen.logppl, "rejected_logppl": pair.rejected.logppl,
                         "margin": pair.margin, "rule": cfg.rule})
    # Replace the auto pairs in one transaction: a rebuild never mixes old and new rules.
    ctx.store.replace("pairs", ctx.run_id, ctx.iteration, rows)
    ctx.report(1, 1, f"{len(rows)} pairs from {groups.ngroups} task-steps")
    return {"rows": len(rows), "groups": int(groups.ngroups)}
