"""The critic queue's read model, as a mixin of ``Store``: every verdict with the grounding it judged, the plan,
the task and the latest curator decision applied, and whether the curators sided with the critic.

Semantics of the override log are ``engine.curation``'s (live rows: ``engine.views.LIVE_OVERRIDE``). One rule says
when curators agreed with the critic, ``AGREES_WITH_CRITIC``: the queue's "overruled" filter and
``engine.agreement``'s Agreement line both read the ``agrees_with_critic`` column it defines, so they cannot drift
apart. ``VerdictViews`` only reads, through the host class's ``query(sql, params)``.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from engine.views import LIVE_OVERRIDE


class VerdictViews:
    """Verdict queries shared by the studio's critic tab, the agreement report and the curation functions."""

    def query(self, sql: str, params: Any = None) -> pd.DataFrame:  # provided by Store
        raise NotImplementedError

    def verdict_status_counts(self, run_id: str) -> pd.DataFrame:
        """How many verdicts of each status every iteration of a run has: ``iteration, status, n``."""
        return self.query("SELECT iteration, status, count(*) AS n FROM verdicts WHERE run_id = ? "
                          "GROUP BY iteration, status ORDER BY iteration, status", [run_id])

    def verdict_rows(self, run_id: str, iteration: int | None = None) -> pd.DataFrame:
        """Every verdict with its grounding, judged plan, task and latest verdict override (all iterations when
        ``iteration`` is None)."""
        params: dict[str, Any] = {"run": run_id}
        cond = "TRUE"
        if iteration is not None:
            cond, params["it"] = "iteration = $it", int(iteration)
        return self.query(f"{_verdicts_sql(cond)} SELECT * FROM vrows ORDER BY iteration, task_id, step, k", params)

    def verdict_queue(
        self,
        run_id: str,
        iteration: int,
        status: str | None = None,
        limit: int = 50,
        offset: int = 0,
        overridden: bool | None = None,
        reviewed: bool | None = None,
        order: str = "task",
        overruled: bool | None = None,
    ) -> pd.DataFrame:
        """A page of verdicts (optionally one critic ``status``, only (not) overridden, only (not) reviewed by
        anybody, only those where the curators' decision overruled (or confirmed) the critic) in a
        ``VERDICT_ORDERS`` order, with a ``total`` column."""
        if order not in VERDICT_ORDERS:
            raise ValueError(f"order must be one of {', '.join(VERDICT_ORDERS)}")
        params: dict[str, Any] = {"run": run_id, "it": int(iteration), "limit": int(limit), "offset": int(offset)}
        conds = []
        if reviewed is not None:
            conds.append("reviewed = $reviewed")
            params["reviewed"] = reviewed
        if status is not None:
            conds.append("status = $status")
            params["status"] = status
        if overridden is not None:
            conds.append("(override_action IS NOT NULL) = $overridden")
            params["overridden"] = overridden
        if overruled is not None:
            conds.append("agrees_with_critic = NOT $overruled")
            params["overruled"] = overruled
        sql = f"""{_verdicts_sql("iteration = $it")}
        SELECT *, count(*) OVER () AS total FROM vrows WHERE {" AND ".join(conds) or "TRUE"}
        ORDER BY {VERDICT_ORDERS[order]} LIMIT $limit OFFSET $offset"""
        return self.query(sql, params)


# The critic queue's orders (fixed snippets): "disagreement": the critic's verdict contradicts the execution first
# (accepted actions that do not reach the gold answer, or "corrected" ones that do): where a critic most often errs;
# "unreviewed": nobody's yet first; "shuffled": a fixed pseudo-random order for audits. Task order breaks ties.
VERDICT_ORDERS = {
    "task": "task_id, step, k",
    "disagreement": "((status = 'accepted') <> coalesce(grounding_correct, FALSE)) AND status IN ('accepted', "
                    "'corrected') DESC, task_id, step, k",
    "unreviewed": "reviewed, task_id, step, k",
    "shuffled": "hash(task_id, step, k), task_id, step, k",
}


# Did the curators side with the critic (NULL: not reviewed)? With a live decision: keep_original confirms an accepted
# verdict, accept_correction a corrected one, drop one that yields nothing; an edit always overrules the critic.
# Without one, a "looks right" as the latest row (vl) left the critic's verdict standing: it agrees. engine.agreement
# counts this column, so the critic queue's "overruled" filter (False: confirmed) lists what the Agreement line counts.
AGREES_WITH_CRITIC = """CASE WHEN vo.action IS NULL THEN (CASE WHEN vl.task_id IS NOT NULL THEN TRUE END)
                WHEN v.status = 'accepted' THEN vo.action = 'keep_original'
                WHEN v.status = 'corrected' THEN vo.action = 'accept_correction'
                ELSE vo.action = 'drop' END"""


def _verdicts_sql(iteration_cond: str) -> str:
    """Verdict rows joined with grounding, plan, task and latest verdict override; ``iteration_cond`` is one of
    two fixed snippets chosen in code (never user text)."""
    return f"""
WITH vo AS (
    SELECT * FROM (
        SELECT o.*, row_number() OVER (PARTITION BY iteration, task_id, step, k ORDER BY override_id DESC) AS rn
        FROM overrides o WHERE o.run_id = $run AND o.target = 'verdict' AND {iteration_cond} AND {LIVE_OVERRIDE})
    WHERE rn = 1 AND action <> 'restore'),
vr AS (  -- verdicts somebody acted on or marked "looks right"
    SELECT DISTINCT iteration, task_id, step, k FROM overrides o
    WHERE o.run_id = $run AND o.target IN ('verdict', 'verdict_review') AND {iteration_cond} AND {LIVE_OVERRIDE}),
vl AS (  -- "looks right" is the latest live curator row (after any decision or restore): the critic left standing
    SELECT iteration, task_id, step, k, curator FROM (
        SELECT o.*, row_number() OVER (PARTITION BY iteration, task_id, step, k ORDER BY override_id DESC) AS rn
        FROM overrides o WHERE o.run_id = $run AND o.target IN ('verdict', 'verdict_review') AND {iteration_cond}
            AND {LIVE_OVERRIDE})
    WHERE rn = 1 AND action = 'reviewed'),
vrows AS (
    SELECT v.*, vo.action AS override_action, vo.after_json AS override_after_json, vo.curator,
           vr.task_id IS NOT NULL AS reviewed,
           {AGREES_WITH_CRITIC} AS agrees_with_critic,
           vl.curator AS looks_right_curator,
           vo.reason AS override_reason, vo.override_id,
           g.actions AS grounding_actions, g.ok AS grounding_ok, g.correct AS grounding_correct,
           g.answer AS grounding_answer, g.error AS grounding_error, g.prompt AS grounding_prompt,
           p.text AS plan_text, p.subgoals_json AS plan_subgoals_json, t.question, t.domain
    FROM (SELECT * FROM verdicts WHERE run_id = $run AND {iteration_cond}) v
    LEFT JOIN vo ON vo.iteration = v.iteration AND vo.task_id = v.task_id AND vo.step = v.step AND vo.k = v.k
    LEFT JOIN vr ON vr.iteration = v.iteration AND vr.task_id = v.task_id AND vr.step = v.step AND vr.k = v.k
    LEFT JOIN vl ON vl.iteration = v.iteration AND vl.task_id = v.task_id AND vl.step = v.step AND vl.k = v.k
    LEFT JOIN groundings g ON g.run_id = v.run_id AND g.iteration = v.iteration AND g.task_id = v.task_id
        AND g.step = v.step AND g.k = v.k
    LEFT JOIN plans p ON p.run_id = v.run_id AND p.iteration = v.iteration AND p.task_id = v.task_id
        AND p.step = v.step AND p.k = v.k
    LEFT JOIN tasks t ON t.run_id = v.run_id AND t.task_id = v.task_id)
"""
