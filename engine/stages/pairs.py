"""Stage ``pairs``: turn scored plans into DPO preference pairs, per task (or per planning step).

Rules (``pairs.rule``): ``best_worst`` (paper): chosen = lowest log-PPL, rejected = highest; ``all_above_gap``:
every pair whose log-PPL gap reaches the threshold; ``top_bottom_k``: each of the k best against each of the k
worst. A pair is kept only when rejected - chosen >= ``min_gap``. Identical plan texts are merged first (the
lowest k stands for them) and equal scores never pair, so a tie or a duplicate is never a preference.
The stage replaces the iteration's *auto* pairs; human overrides live in their own table and apply on top.
``pairs.max_tasks`` > 0 keeps the pairs of a seeded subset of the iteration's training tasks only (the same subset
every time the stage runs), so DPO's data per iteration stays fixed while stage 2 grounds every sampled task.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from engine.ranking import Candidate, distinct
from engine.runtime import sample_tasks
from engine.stages.context import StageContext
from engine.tasks import Task

__all__ = ["Candidate", "Pair", "build_pairs", "dpo_tasks", "run"]


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


def dpo_tasks(tasks: list[Task], limit: int, seed: int, iteration: int) -> list[Task]:
    """The iteration's tasks whose pairs DPO trains on: a seeded subset of ``limit``, the same each time the stage
    runs for this seed and iteration."""
    return sample_tasks(tasks, limit, seed * 1000 + iteration + 500_000)


def run(ctx: StageContext) -> dict[str, int]:
    cfg = ctx.config.pairs
    scored = ctx.store.query(
        "SELECT p.task_id, p.step, p.k, p.text, s.logppl FROM plans p JOIN scores s USING "
        "(run_id, iteration, task_id, step, k) WHERE p.run_id = ? AND p.iteration = ? ORDER BY p.task_id, p.step, "
        "p.k", [ctx.run_id, ctx.iteration])
    if cfg.max_tasks:
        kept = {t.id for t in dpo_tasks(ctx.train_tasks(), cfg.max_tasks, ctx.config.run.seed, ctx.iteration)}
        scored = scored[scored.task_id.isin(kept)]
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
