"""The read models behind the studio's pages and the curated exports, as a mixin of ``Store``.

Effective pairs are the auto results with the latest curator override applied (semantics:
``engine.curation``); the pages are filtered and paginated in SQL with a ``total`` column (matching rows before
LIMIT/OFFSET). ``StudioViews`` only reads: it relies on the host class's ``query(sql, params)`` and, for
``pairs_page``, its ``pair_view`` (the materialised pairs of ``engine.pair_view``; ``pairs_page_sql`` is the same
page from the base tables). The critic queue's verdicts are ``engine.verdict_views``; ``LIVE_OVERRIDE`` (which rows
of the override log count) is shared by both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd

if TYPE_CHECKING:
    from engine.pair_view import PairView


class StudioViews:
    """Page queries shared by the studio, the curation functions and the exports."""

    def query(self, sql: str, params: Any = None) -> pd.DataFrame:  # provided by Store
        raise NotImplementedError

    def effective_pairs(self, run_id: str, iteration: int, task_id: str | None = None) -> pd.DataFrame:
        """Auto pairs with the latest pair override applied, one row per (task_id, step, pair_idx)."""
        params: dict[str, Any] = {"run": run_id, "it": iteration}
        if task_id is not None:
            params["task"] = task_id
        sql = effective_pairs_sql("all" if task_id is None else "task")
        return self.query(f"{sql} SELECT * FROM eff ORDER BY task_id, step, pair_idx", params)

    def pairs_page(
        self,
        run_id: str,
        iteration: int,
        *,
        min_margin: float | None = None,
        max_margin: float | None = None,
        text: str | None = None,
        overridden: bool | None = None,
        excluded: bool | None = None,
        ties: bool | None = None,
        order: str = "task",
        limit: int = 50,
        offset: int = 0,
    ) -> pd.DataFrame:
        """One page of effective pairs with the task question/domain and both plan texts.

        ``text`` matches (case-insensitively, literally) the question or either plan; ``order`` is ``task``,
        ``margin``, ``-margin``, ``length`` (chosen and rejected lengths most different first) or ``shuffled``.
        The ``total`` column counts all matching rows (0 rows -> empty frame). Read from
        the host's materialised ``PairView`` (``engine.pair_view``); ``pairs_page_sql`` is the same page computed
        from the base tables on every call.
        """
        # the view keeps lower-cased texts: the same match for less work
        conds, params = _pair_filters(min_margin, max_margin, text, overridden, excluded, ties,
                                      self.pair_view.text_filter)
        if order not in PAGE_ORDERS:
            raise ValueError(f"order must be one of {', '.join(PAGE_ORDERS)}")
        return self.pair_view.page(run_id, int(iteration), conds, params, order, limit, offset)

    def pair_stats(self, run_id: str, iteration: int) -> pd.DataFrame:
        """Margin, excluded, tie and both plan lengths of every effective pair (the pairs tab's charts)."""
        return self.pair_view.stats(run_id, int(iteration))

    @property
    def pair_view(self) -> PairView:  # provided by Store
        raise NotImplementedError

    def pairs_page_sql(self, run_id: str, iteration: int, *, min_margin: float | None = None,
                       max_margin: float | None = None, text: str | None = None, overridden: bool | None = None,
                       excluded: bool | None = None, ties: bool | None = None, order: str = "task", limit: int = 50,
                       offset: int = 0) -> pd.DataFrame:
        """``pairs_page`` straight from the base tables (overrides applied and texts joined on every call): the
        baseline ``bench store`` measures the materialised page against, and checks it equal to."""
        conds, params = _pair_filters(min_margin, max_margin, text, overridden, excluded, ties)
        if order not in PAGE_ORDERS:
            raise ValueError(f"order must be one of {', '.join(PAGE_ORDERS)}")
        params = {**params, "run": run_id, "it": int(iteration), "limit": int(limit), "offset": int(offset)}
        by = PAGE_ORDERS[order]
        join = """LEFT JOIN tasks t ON t.run_id = $run AND t.task_id = e.task_id
            LEFT JOIN plans pc ON pc.run_id = $run AND pc.iteration = $it AND pc.task_id = e.task_id
                AND pc.step = e.step AND pc.k = e.chosen_k
            LEFT JOIN plans pr ON pr.run_id = $run AND pr.iteration = $it AND pr.task_id = e.task_id
                AND pr.step = e.step AND pr.k = e.rejected_k"""
        if text or order in TEXT_ORDERS:  # the filter or the order needs the plan texts: join every pair, then page
            sql = f"""{EFFECTIVE_PAIRS_SQL}, joined AS (
                SELECT e.*, t.question, t.domain, pc.text AS chosen_text, pr.text AS rejected_text
                FROM eff e {join})
            SELECT *, count(*) OVER () AS total FROM joined WHERE {" AND ".join(conds) or "TRUE"}
            ORDER BY {by} LIMIT $limit OFFSET $offset"""
        else:  # page the effective pairs first, then join texts for the page's rows only
            sql = f"""{EFFECTIVE_PAIRS_SQL}, page AS (
                SELECT *, count(*) OVER () AS total FROM eff WHERE {" AND ".join(conds) or "TRUE"}
                ORDER BY {by} LIMIT $limit OFFSET $offset),
            joined AS (
                SELECT e.* EXCLUDE (total), t.question, t.domain, pc.text AS chosen_text, pr.text AS rejected_text,
                       e.total
                FROM page e {join})
            SELECT * FROM joined ORDER BY {by}"""
        return self.query(sql, params)

    def task_plans(self, run_id: str, iteration: int, task_id: str, step: int | None = None) -> pd.DataFrame:
        """The K plans of a task (every step, or one) with scores, sorted by step then logppl (best first), flagged
        ``chosen``/``rejected`` from the effective pairs (``in_training`` when that pair is neither excluded nor tie).
        """
        params: dict[str, Any] = {"run": run_id, "it": iteration, "task": task_id}
        step_cond = ""
        if step is not None:
            step_cond, params["step"] = "AND p.step = $step", int(step)
        sql = f"""{EFFECTIVE_PAIRS_SQL}, flags AS (
            SELECT step, k, bool_or(role = 'chosen') AS chosen, bool_or(role = 'rejected') AS rejected,
                   bool_or(NOT excluded AND NOT tie) AS in_training
            FROM (SELECT step, chosen_k AS k, 'chosen' AS role, excluded, tie FROM eff WHERE task_id = $task
                  UNION ALL
                  SELECT step, rejected_k, 'rejected', excluded, tie FROM eff WHERE task_id = $task)
            GROUP BY step, k)
        SELECT p.task_id, p.step, p.k, p.text, p.subgoals_json, p.well_formed, s.logppl, s.ppl, s.n_tokens,
               coalesce(f.chosen, FALSE) AS chosen, coalesce(f.rejected, FALSE) AS rejected,
               coalesce(f.in_training, FALSE) AS in_training
        FROM plans p
        LEFT JOIN scores s USING (run_id, iteration, task_id, step, k)
        LEFT JOIN flags f ON f.step = p.step AND f.k = p.k
        WHERE p.run_id = $run AND p.iteration = $it AND p.task_id = $task {step_cond}
        ORDER BY p.step, s.logppl NULLS LAST, p.k"""
        return self.query(sql, params)

    def plan_texts(self, run_id: str, iteration: int, task_id: str, step: int) -> pd.DataFrame:
        """``k``, ``text`` and ``prompt`` of every plan of one task-step."""
        return self.query("SELECT k, text, prompt FROM plans WHERE run_id = ? AND iteration = ? AND task_id = ? "
                          "AND step = ? ORDER BY k", [run_id, int(iteration), task_id, int(step)])

    def task_page(self, run_id: str, iteration: int, *, text: str = "", domain: str = "", split: str = "",
                  page: int = 1, size: int = 20) -> pd.DataFrame:
        """One page of a run's tasks, most plans in ``iteration`` first: ``task_id, domain, split, question, plans``,
        ``total`` (all matching tasks) and ``with_plans`` (those of them with a plan in ``iteration``). ``text``
        matches the question or the id, case-blind."""
        conds, params = ["t.run_id = $run"], {"run": run_id, "it": int(iteration), "limit": int(size),
                                              "offset": (max(int(page), 1) - 1) * int(size)}
        if text:
            conds.append("(contains(lower(t.question), lower($text)) OR contains(lower(t.task_id), lower($text)))")
            params["text"] = text
        for name, value in (("domain", domain), ("split", split)):
            if value:
                conds.append(f"t.{name} = ${name}")  # name is one of the two literals above, never user text
                params[name] = value
        sql = f"""SELECT *, count(*) OVER () AS total, count(*) FILTER (WHERE plans > 0) OVER () AS with_plans
                  FROM (SELECT t.task_id, t.domain, t.split, t.question,
                               (SELECT count(*) FROM plans p WHERE p.run_id = $run AND p.iteration = $it
                                AND p.task_id = t.task_id) AS plans
                        FROM tasks t WHERE {" AND ".join(conds)})
                  ORDER BY plans DESC, task_id LIMIT $limit OFFSET $offset"""
        return self.query(sql, params)

    def task_facets(self, run_id: str) -> dict[str, list[str]]:
        """The domains and splits a run's tasks have (``{"domain": [...], "split": [...]}``), splits in pipeline order
        (train, dev, held_in, held_out, then any other name), for filters that offer only what a run holds."""
        rows = self.query("SELECT DISTINCT domain, split FROM tasks WHERE run_id = ?", [run_id])
        order = {"train": 0, "dev": 1, "held_in": 2, "held_out": 3}
        splits = sorted({str(s) for s in rows["split"].dropna()}, key=lambda s: (order.get(s, len(order)), s))
        return {"domain": sorted({str(d) for d in rows["domain"].dropna()}), "split": splits}

    def train_log_rows(self, run_id: str, stage: str | None = None) -> pd.DataFrame:
        """A run's training log lines (``iteration, stage, step, loss, logs_json``) in the order they were logged,
        for one training stage or both."""
        cond, params = ("AND stage = ?", [run_id, stage]) if stage else ("", [run_id])
        return self.query(f"SELECT iteration, stage, step, loss, logs_json FROM train_logs WHERE run_id = ? {cond} "
                          "ORDER BY iteration, stage, seq", params)


# The pairs page's orders, one set for both sources of a page (these queries and engine.pair_view's materialised
# table): the leading keys, then task order breaks every tie so pages are stable. Fixed snippets, never user text.
# "length": suspected length bias first (the two plans' lengths differ most); "shuffled": a fixed pseudo-random order
# (a hash of the key) for audits that should not follow the task or the margin. Both need the plan texts.
PAIR_ORDER_KEYS = {"task": "", "margin": "margin", "-margin": "margin DESC",
                   "length": "abs(length(chosen_text) - length(rejected_text)) DESC",
                   "shuffled": "hash(task_id, step, pair_idx)",
                   "unreviewed": "reviewed, margin"}  # nobody's yet first, then the smallest margin
TEXT_ORDERS = ("length", "shuffled")  # orders over the joined plan texts


def pair_order_by(order: str, task_order: str = "task_id, step, pair_idx") -> str:
    """The ORDER BY list of a page order; ``task_order`` is how the source spells (task_id, step, pair_idx) order."""
    return ", ".join(part for part in (PAIR_ORDER_KEYS[order], task_order) if part)


def pair_text_filter(question: str = "lower(question)", chosen: str = "lower(chosen_text)",
                     rejected: str = "lower(rejected_text)") -> str:
    """The pairs page's text condition (``$text`` in the question or either plan, case-blind) over a source's
    lower-cased columns (the materialised table keeps lower-cased copies so a search does not lower every text)."""
    return " OR ".join(f"contains({column}, lower($text))" for column in (question, chosen, rejected)).join("()")


PAGE_ORDERS = {order: pair_order_by(order) for order in PAIR_ORDER_KEYS}
_TEXT_FILTER = pair_text_filter()


def _pair_filters(min_margin: float | None, max_margin: float | None, text: str | None, overridden: bool | None,
                  excluded: bool | None, ties: bool | None, text_filter: str = _TEXT_FILTER
                  ) -> tuple[list[str], dict[str, Any]]:
    """The pairs page's WHERE snippets (fixed SQL over effective-pair columns) and their parameters."""
    conds: list[str] = []
    params: dict[str, Any] = {}
    for name, value, sql in (
        ("min_margin", min_margin, "margin >= $min_margin"),
        ("max_margin", max_margin, "margin <= $max_margin"),
        ("overridden", overridden, "overridden = $overridden"),
        ("excluded", excluded, "excluded = $excluded"),
        ("ties", ties, "tie = $ties"),
    ):
        if value is not None:
            conds.append(sql)
            params[name] = value
    if text:
        conds.append(text_filter)
        params["text"] = text
    return conds, params


# An override row that counts: not an "undo" row, and not undone by one (``engine.review_trail.undo_last`` appends
# {"undoes": override_id} rows; the undone row stays in the log for the audit). Over the alias ``o``.
LIVE_OVERRIDE = """o.action <> 'undo' AND NOT EXISTS (
    SELECT 1 FROM overrides u WHERE u.run_id = o.run_id AND u.action = 'undo'
        AND json_extract_string(u.after_json, '$.undoes') = CAST(o.override_id AS VARCHAR))"""

# Latest pair override per (task_id, step, pair_idx); a "restore" as the latest row means "back to auto".
# Pair overrides name their pair in the pair_idx column and, for "choose", chosen_k/rejected_k in after_json.
# ``{scope}`` narrows both the pairs and the overrides read (and so every join after them) to some tasks; it is one
# of the fixed snippets in ``SCOPES``, never user text.
# ``tasks`` also bounds task_id by $lo/$hi (the list's min and max): a range on constants lets DuckDB skip row
# groups by their min/max statistics, which a list lookup alone does not.
SCOPES = {"all": "", "task": "AND task_id = $task",
          "tasks": "AND task_id BETWEEN $lo AND $hi AND list_contains($tasks, task_id)"}
_EFFECTIVE_PAIRS_TEMPLATE = """
WITH po AS (
    SELECT o.*, coalesce(o.pair_idx, 0) AS pidx
    FROM overrides o WHERE o.run_id = $run AND o.iteration = $it AND o.target = 'pair' {scope}
        AND {live}),
lo AS (
    SELECT * FROM (SELECT po.*, row_number() OVER (PARTITION BY task_id, step, pidx ORDER BY override_id DESC) AS rn
                   FROM po)
    WHERE rn = 1 AND action <> 'restore'),
-- pairs somebody acted on or marked reviewed (a restore counts: somebody looked), for the "not reviewed" order
rv AS (
    SELECT DISTINCT task_id AS rv_task, step AS rv_step, coalesce(o.pair_idx, 0) AS rv_pidx
    FROM overrides o WHERE o.run_id = $run AND o.iteration = $it AND o.target IN ('pair', 'pair_review') {scope}
        AND {live}),
base AS (
    SELECT coalesce(p.task_id, lo.task_id) AS task_id, coalesce(p.step, lo.step) AS step,
           coalesce(p.pair_idx, lo.pidx) AS pair_idx, coalesce(p.rule, 'manual') AS rule,
           p.chosen_k AS auto_chosen_k, p.rejected_k AS auto_rejected_k,
           p.chosen_logppl AS a_chosen_logppl, p.rejected_logppl AS a_rejected_logppl,
           lo.action AS override_action, lo.override_id, lo.curator, lo.reason AS override_reason,
           TRY_CAST(json_extract_string(lo.after_json, '$.chosen_k') AS INTEGER) AS o_chosen_k,
           TRY_CAST(json_extract_string(lo.after_json, '$.rejected_k') AS INTEGER) AS o_rejected_k
    FROM (SELECT * FROM pairs WHERE run_id = $run AND iteration = $it {scope}) p
    FULL OUTER JOIN lo ON p.task_id = lo.task_id AND p.step = lo.step AND p.pair_idx = lo.pidx
    -- an override of a pair the rule no longer produces has nothing to act on, except an explicit choice
    WHERE p.task_id IS NOT NULL OR lo.action = 'choose'),
ks AS (
    SELECT b.*,
        CASE override_action WHEN 'swap' THEN auto_rejected_k WHEN 'choose' THEN o_chosen_k ELSE auto_chosen_k END
            AS chosen_k,
        CASE override_action WHEN 'swap' THEN auto_chosen_k WHEN 'choose' THEN o_rejected_k ELSE auto_rejected_k END
            AS rejected_k
    FROM base b),
-- logppls of curator-chosen plans: only the few 'choose' rows touch the (large) scores table
ch AS (
    SELECT ks.task_id, ks.step, ks.pair_idx, sc.logppl AS c_logppl, sr.logppl AS r_logppl
    FROM (SELECT * FROM ks WHERE override_action = 'choose') ks
    LEFT JOIN scores sc ON sc.run_id = $run AND sc.iteration = $it AND sc.task_id = ks.task_id
        AND sc.step = ks.step AND sc.k = ks.chosen_k
    LEFT JOIN scores sr ON sr.run_id = $run AND sr.iteration = $it AND sr.task_id = ks.task_id
        AND sr.step = ks.step AND sr.k = ks.rejected_k),
lp AS (
    SELECT ks.*,
        CASE override_action WHEN 'swap' THEN a_rejected_logppl WHEN 'choose' THEN ch.c_logppl
            ELSE a_chosen_logppl END AS chosen_logppl,
        CASE override_action WHEN 'swap' THEN a_chosen_logppl WHEN 'choose' THEN ch.r_logppl
            ELSE a_rejected_logppl END AS rejected_logppl
    FROM ks LEFT JOIN ch USING (task_id, step, pair_idx)),
eff AS (
    SELECT $run AS run_id, CAST($it AS INTEGER) AS iteration, task_id, step, pair_idx, chosen_k, rejected_k,
           chosen_logppl, rejected_logppl, rejected_logppl - chosen_logppl AS margin, rule,
           auto_chosen_k, auto_rejected_k,
           override_action IS NOT NULL AS overridden,
           coalesce(override_action = 'exclude', FALSE) AS excluded,
           coalesce(override_action = 'tie', FALSE) AS tie,
           override_action, override_id, curator, override_reason,
           rv_task IS NOT NULL AS reviewed
    FROM lp LEFT JOIN rv ON rv_task = lp.task_id AND rv_step = lp.step AND rv_pidx = lp.pair_idx)
"""


def effective_pairs_sql(scope: str = "all", live: str = LIVE_OVERRIDE) -> str:
    """The ``WITH ... eff AS (...)`` prefix of effective pairs, over all pairs of ``$run``/``$it`` or a ``SCOPES``
    subset (``task``: ``$task``; ``tasks``: the list ``$tasks`` with its least and greatest ids ``$lo``/``$hi``).
    ``live`` is the condition an override row must meet to count (over the alias ``o``): the log as it stands now,
    or, for ``engine.curation_summary.pairs_as_of``, as it stood at an earlier row."""
    return _EFFECTIVE_PAIRS_TEMPLATE.format(scope=SCOPES[scope], live=live)


EFFECTIVE_PAIRS_SQL = effective_pairs_sql()
