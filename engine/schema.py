"""The DuckDB schema of a MOAT Studio workspace, as versioned DDL.

Every row a stage produces is keyed by ``(run_id, iteration, task_id, step, k)`` or a prefix of it: ``step`` is
the planning step (0 for onetime plans, 1.. for the iterative formulation), ``k`` the index of a sampled plan.
Primary keys make re-running a stage idempotent (``INSERT OR REPLACE``), so a resumed stage never duplicates
rows. JSON columns hold lists/dicts as text. A stage's ``started_at`` .. ``finished_at`` is its latest span and
``earlier_s`` the seconds of the spans before it (``engine.ledger``). ``MIGRATIONS[v]`` upgrades a store from
version ``v`` to ``v + 1``.

``migrate(cur, ...)`` brings an opened file to ``SCHEMA_VERSION``: a new file gets ``DDL_V1`` and every migration, an
older one every missing migration in ONE transaction (a failure or a kill leaves it at its old version), and a
newer store, someone else's DuckDB database or a version-less one is refused untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb

from engine.errors import StoreError, StoreVersionError

SCHEMA_VERSION = 7

DDL_V1 = """
CREATE TABLE IF NOT EXISTS schema_info (version INTEGER NOT NULL);

CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL DEFAULT current_timestamp,
    config_json TEXT NOT NULL,          -- the full config snapshot the run was created with
    run_dir TEXT NOT NULL               -- checkpoints and logs live under it
);

CREATE TABLE IF NOT EXISTS stages (
    run_id TEXT NOT NULL,
    iteration INTEGER NOT NULL,
    stage TEXT NOT NULL,                -- sample | score | pairs | train_planner | ground | critique | ...
    status TEXT NOT NULL,               -- pending | running | done | failed | stopped | skipped
    started_at TIMESTAMP,
    finished_at TIMESTAMP,
    counts_json TEXT,                   -- {"rows": n, ...} what the stage wrote
    error TEXT,
    PRIMARY KEY (run_id, iteration, stage)
);

CREATE TABLE IF NOT EXISTS tasks (
    run_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    domain TEXT NOT NULL,
    source TEXT NOT NULL,
    split TEXT NOT NULL,
    question TEXT NOT NULL,
    context_json TEXT NOT NULL,
    gold_subgoals_json TEXT NOT NULL,
    gold_actions_json TEXT NOT NULL,
    answer TEXT NOT NULL,
    meta_json TEXT NOT NULL,
    PRIMARY KEY (run_id, task_id)
);

CREATE TABLE IF NOT EXISTS plans (
    run_id TEXT NOT NULL,
    iteration INTEGER NOT NULL,
    task_id TEXT NOT NULL,
    step INTEGER NOT NULL,
    k INTEGER NOT NULL,
    prompt TEXT NOT NULL,               -- the planner prompt the plan was sampled from
    text TEXT NOT NULL,                 -- the raw planner output
    subgoals_json TEXT NOT NULL,        -- parsed subgoals (empty list when malformed)
    well_formed BOOLEAN NOT NULL,
    created_at TIMESTAMP NOT NULL DEFAULT current_timestamp,
    PRIMARY KEY (run_id, iteration, task_id, step, k)
);

CREATE TABLE IF NOT EXISTS scores (
    run_id TEXT NOT NULL,
    iteration INTEGER NOT NULL,
    task_id TEXT NOT NULL,
    step INTEGER NOT NULL,
    k INTEGER NOT NULL,
    logppl DOUBLE NOT NULL,             -- grounder mean NLL of the gold actions (+EOS) given task + plan
    ppl DOUBLE NOT NULL,
    n_tokens INTEGER NOT NULL,
    PRIMARY KEY (run_id, iteration, task_id, step, k)
);

CREATE TABLE IF NOT EXISTS pairs (
    run_id TEXT NOT NULL,
    iteration INTEGER NOT NULL,
    task_id TEXT NOT NULL,
    step INTEGER NOT NULL,
    pair_idx INTEGER NOT NULL,
    chosen_k INTEGER NOT NULL,
    rejected_k INTEGER NOT NULL,
    chosen_logppl DOUBLE NOT NULL,
    rejected_logppl DOUBLE NOT NULL,
    margin DOUBLE NOT NULL,             -- rejected_logppl - chosen_logppl
    rule TEXT NOT NULL,                 -- best_worst | all_above_gap | top_bottom_k
    PRIMARY KEY (run_id, iteration, task_id, step, pair_idx)
);

CREATE TABLE IF NOT EXISTS groundings (
    run_id TEXT NOT NULL,
    iteration INTEGER NOT NULL,
    task_id TEXT NOT NULL,
    step INTEGER NOT NULL,
    k INTEGER NOT NULL,
    prompt TEXT NOT NULL,
    actions TEXT NOT NULL,
    ok BOOLEAN NOT NULL,                -- parsed and executed without error
    values_json TEXT NOT NULL,
    answer TEXT,
    correct BOOLEAN NOT NULL,
    error TEXT,
    PRIMARY KEY (run_id, iteration, task_id, step, k)
);

CREATE TABLE IF NOT EXISTS verdicts (
    run_id TEXT NOT NULL,
    iteration INTEGER NOT NULL,
    task_id TEXT NOT NULL,
    step INTEGER NOT NULL,
    k INTEGER NOT NULL,
    backend TEXT NOT NULL,              -- reference | openai | hf
    model TEXT,
    status TEXT NOT NULL,               -- accepted | corrected | unfixable | unparsed | truncated | error
    reference_guided BOOLEAN NOT NULL,  -- true when gold annotations, not a model, decided the verdict
    raw TEXT,                           -- the critic's raw response (or the reference critic's explanation)
    corrected_subgoals_json TEXT,       -- null unless corrected
    corrected_actions TEXT,
    latency_s DOUBLE,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    finish_reason TEXT,
    created_at TIMESTAMP NOT NULL DEFAULT current_timestamp,
    PRIMARY KEY (run_id, iteration, task_id, step, k)
);

CREATE TABLE IF NOT EXISTS critic_cache (
    model TEXT NOT NULL,
    prompt_sha256 TEXT NOT NULL,
    response_json TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL DEFAULT current_timestamp,
    PRIMARY KEY (model, prompt_sha256)
);

CREATE SEQUENCE IF NOT EXISTS override_ids START 1;
CREATE TABLE IF NOT EXISTS overrides (
    override_id BIGINT PRIMARY KEY DEFAULT nextval('override_ids'),
    run_id TEXT NOT NULL,
    iteration INTEGER NOT NULL,
    target TEXT NOT NULL,               -- pair | verdict
    task_id TEXT NOT NULL,
    step INTEGER NOT NULL,
    k INTEGER,                          -- verdict overrides: the judged plan
    action TEXT NOT NULL,               -- pair: swap | exclude | tie | choose | restore; verdict: keep_original |
                                        --   accept_correction | edit | drop | restore
    before_json TEXT,
    after_json TEXT,
    curator TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    created_at TIMESTAMP NOT NULL DEFAULT current_timestamp
);

CREATE TABLE IF NOT EXISTS train_logs (
    run_id TEXT NOT NULL,
    iteration INTEGER NOT NULL,
    stage TEXT NOT NULL,                -- train_planner | train_grounder
    seq INTEGER NOT NULL,               -- order of the log line within the stage
    step INTEGER NOT NULL,              -- trainer global step
    epoch DOUBLE,
    loss DOUBLE,
    logs_json TEXT NOT NULL,            -- every key TRL logged (rewards/chosen, rewards/margins, ...)
    created_at TIMESTAMP NOT NULL DEFAULT current_timestamp,
    PRIMARY KEY (run_id, iteration, stage, seq)
);

CREATE TABLE IF NOT EXISTS metrics (
    run_id TEXT NOT NULL,
    iteration INTEGER NOT NULL,         -- metrics of the agents *after* iteration t (t = 0: warm-start agents)
    split TEXT NOT NULL,
    domain TEXT NOT NULL,               -- a domain or "all"
    name TEXT NOT NULL,                 -- accuracy | em | f1 | gap_logppl | n | ...
    value DOUBLE NOT NULL,
    PRIMARY KEY (run_id, iteration, split, domain, name)
);

CREATE TABLE IF NOT EXISTS eval_traces (
    run_id TEXT NOT NULL,
    iteration INTEGER NOT NULL,
    task_id TEXT NOT NULL,
    split TEXT NOT NULL,
    domain TEXT NOT NULL,
    plan TEXT NOT NULL,
    actions TEXT NOT NULL,
    answer TEXT,
    correct BOOLEAN NOT NULL,
    gold_logppl DOUBLE,
    trace_json TEXT NOT NULL,
    PRIMARY KEY (run_id, iteration, task_id)
);

CREATE TABLE IF NOT EXISTS checkpoints (
    run_id TEXT NOT NULL,
    iteration INTEGER NOT NULL,         -- the agent produced by iteration t (pi(t+1))
    role TEXT NOT NULL,                 -- planner | grounder
    path TEXT NOT NULL,
    kind TEXT NOT NULL,                 -- full | lora-merged | lora-adapter (adapter + moat_base.json) | unchanged
    created_at TIMESTAMP NOT NULL DEFAULT current_timestamp,
    PRIMARY KEY (run_id, iteration, role)
);
"""

# version -> DDL that upgrades a store from that version to the next. New stores run DDL_V1 and then all of them.
MIGRATIONS: dict[int, str] = {
    # v2: keep what a critic reports beyond the fixed columns (parse error, cache hit, retry attempts).
    1: "ALTER TABLE verdicts ADD COLUMN extra_json TEXT;",
    # v3: experiments (variants x seeds as ordinary runs, grouped) and planner x grounder swap evaluations.
    2: """
CREATE TABLE IF NOT EXISTS experiments (
    experiment_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL DEFAULT current_timestamp,
    config_json TEXT NOT NULL,          -- the experiment as loaded: base config, variants, seeds, iterations
    source TEXT                         -- the experiment file it came from
);

CREATE TABLE IF NOT EXISTS experiment_runs (
    experiment_id TEXT NOT NULL,
    variant TEXT NOT NULL,
    seed BIGINT NOT NULL,
    run_id TEXT NOT NULL,               -- an ordinary run of this store
    PRIMARY KEY (experiment_id, variant, seed)
);

CREATE TABLE IF NOT EXISTS swaps (
    run_id TEXT NOT NULL,
    planner_after INTEGER NOT NULL,     -- the planner after iteration t (0: the starting planner); -1: gold plans
    grounder_after INTEGER NOT NULL,    -- the grounder after iteration t (0: the starting grounder)
    split TEXT NOT NULL,
    domain TEXT NOT NULL,               -- a domain or "all"
    name TEXT NOT NULL,                 -- accuracy | n | correct | gap_logppl | ...
    value DOUBLE NOT NULL,
    created_at TIMESTAMP NOT NULL DEFAULT current_timestamp,
    PRIMARY KEY (run_id, planner_after, grounder_after, split, domain, name)
);
""",
    # v4: a pair override names its pair in a column (it was only in after_json), so the effective-pairs view joins
    # on a column; existing pair overrides get theirs from after_json (0 when absent, the single-pair default).
    3: """
ALTER TABLE overrides ADD COLUMN pair_idx INTEGER;
UPDATE overrides SET pair_idx = coalesce(TRY_CAST(json_extract_string(after_json, '$.pair_idx') AS INTEGER), 0)
WHERE target = 'pair';
""",
    # v5: online group RL of the planner (stages.planner_objective = grpo) keeps every rollout the trainer scored.
    4: """
CREATE TABLE IF NOT EXISTS rollouts (
    run_id TEXT NOT NULL,
    iteration INTEGER NOT NULL,
    batch INTEGER NOT NULL,             -- generation batch of the GRPO trainer (one per optimizer step)
    n INTEGER NOT NULL,                 -- position in the batch; groups of grpo.num_generations share a task
    task_id TEXT NOT NULL,
    prompt TEXT NOT NULL,               -- the planner prompt (as plans.prompt)
    text TEXT NOT NULL,                 -- the plan the planner wrote
    rewards_json TEXT NOT NULL,         -- {"gap": -1.9, "execution": 1.0, ...} each named reward (null: unscorable)
    reward DOUBLE,                      -- their weighted sum (NULL: unscorable)
    advantage DOUBLE NOT NULL,          -- the group advantage the trainer used
    PRIMARY KEY (run_id, iteration, batch, n)
);
""",
    # v6: the grounder can be trained by GRPO too (stages.grounder_objective = grpo): a rollout names its role, and
    # the key gains it (DuckDB cannot change a key in place: the table is rebuilt; old rollouts are the planner's).
    5: """
CREATE TABLE rollouts_v6 (
    run_id TEXT NOT NULL,
    iteration INTEGER NOT NULL,
    role TEXT NOT NULL DEFAULT 'planner',  -- planner: a plan per rollout | grounder: an action sequence per rollout
    batch INTEGER NOT NULL,
    n INTEGER NOT NULL,
    task_id TEXT NOT NULL,
    prompt TEXT NOT NULL,               -- the planner prompt (as plans.prompt) or the grounder's (groundings.prompt)
    text TEXT NOT NULL,                 -- what the role wrote
    rewards_json TEXT NOT NULL,
    reward DOUBLE,
    advantage DOUBLE NOT NULL,
    PRIMARY KEY (run_id, iteration, role, batch, n)
);
INSERT INTO rollouts_v6 SELECT run_id, iteration, 'planner', batch, n, task_id, prompt, text, rewards_json, reward,
    advantage FROM rollouts;
DROP TABLE rollouts;
ALTER TABLE rollouts_v6 RENAME TO rollouts;
""",
    # v7: a stage stopped (or failed) and run again keeps the time of its earlier spans; started_at .. finished_at
    # stay the latest span (what the studio's "running" card and ETA read). A store from before v7 kept only the
    # latest span, so its stages start at 0 earlier seconds: the spans it overwrote are not known. No NOT NULL:
    # DuckDB 1.x cannot add a column with a constraint ("not yet supported"); readers take a NULL as 0.
    6: """
ALTER TABLE stages ADD COLUMN earlier_s DOUBLE DEFAULT 0;  -- seconds of the spans before the latest one
""",
}


def migrate(cur: duckdb.DuckDBPyConnection, path: Path, read_only: bool,
            transaction: Callable[[duckdb.DuckDBPyConnection, Callable[[Any], Any]], Any]) -> int:
    """Create, upgrade or check the schema of the file behind ``cur``; returns ``SCHEMA_VERSION``.

    ``transaction(cur, body)`` runs ``body`` in one transaction (the Store's, with its conflict retries).
    """
    # Every table of this file, in any schema: a database with tables only outside "main" is not empty either.
    tables = [t if s == "main" else f"{s}.{t}" for s, t in cur.execute(
        "SELECT schema_name, table_name FROM duckdb_tables() WHERE database_name = current_database() "
        "AND NOT temporary ORDER BY schema_name, table_name"
    ).fetchall()]
    if "schema_info" not in tables:
        if tables:  # someone else's database: adding our tables to it would be a corruption
            raise StoreError(
                f"{path} is a DuckDB database but not a MOAT Studio store (no schema_info table; it "
                f"has {', '.join(tables[:8])}{' ...' if len(tables) > 8 else ''}); use --db to pick another"
            )
        if read_only:
            raise StoreError(f"{path} is not a MOAT Studio store (no schema_info)")
        transaction(cur, lambda c: create(c))
        return SCHEMA_VERSION
    version = cur.execute("SELECT max(version) FROM schema_info").fetchall()[0][0]
    if version is None:
        raise StoreError(f"{path}: schema_info holds no version; not a store this engine can open")
    if version > SCHEMA_VERSION:
        raise StoreVersionError(
            f"{path} has schema version {version}, newer than this engine's {SCHEMA_VERSION}; "
            "upgrade the engine or use another --db"
        )
    if version < SCHEMA_VERSION:
        if read_only:
            raise StoreVersionError(
                f"{path} has old schema version {version} (this engine: {SCHEMA_VERSION}); "
                "open it writable once to migrate it"
            )
        try:  # every step in ONE transaction: a failure or a kill leaves the file at its old version
            transaction(cur, lambda c: upgrade(c, version))
        except duckdb.Error as exc:
            raise StoreError(
                f"migrating {path} from schema version {version} to {SCHEMA_VERSION} failed; "
                f"the file is unchanged at version {version}: {exc}"
            ) from exc
    return SCHEMA_VERSION


def create(cur: duckdb.DuckDBPyConnection) -> None:
    """A new store takes the same path as an old one: version 1, then every migration in order."""
    cur.execute(DDL_V1)
    for version in range(1, SCHEMA_VERSION):
        cur.execute(MIGRATIONS[version])
    cur.execute("DELETE FROM schema_info")
    cur.execute("INSERT INTO schema_info VALUES (?)", [SCHEMA_VERSION])


def upgrade(cur: duckdb.DuckDBPyConnection, version: int) -> None:
    """Every migration from ``version`` to ``SCHEMA_VERSION``, in the caller's transaction."""
    for v in range(version, SCHEMA_VERSION):
        if v not in MIGRATIONS:
            raise StoreVersionError(f"no migration from schema version {v} to {v + 1}")
        cur.execute(MIGRATIONS[v])
    cur.execute("DELETE FROM schema_info")
    cur.execute("INSERT INTO schema_info VALUES (?)", [SCHEMA_VERSION])
