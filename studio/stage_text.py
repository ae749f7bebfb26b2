"""One human line per stage of a run for the Run tab ("96 pairs from 96 tasks, median margin 0.31"), built from the
stage's stored counts and, where a count alone says little, the rows the stage wrote (pair margins, verdict
statuses, accuracies). Pure reads. The status beside the line says the stage's state, so the line never says it a
second time: a running stage says what it does ("sampling plans"; with the worker's last progress message when the
caller has it, "sampling plans: 12 plans"), a failed one that recorded no counts its error's first line (or nothing),
a skipped one why, a pending one nothing, and one stopped or interrupted what it kept and how it goes on
(``resume_line``).

How each role learns follows the run's config (``stages.planner_objective``: DPO or GRPO;
``stages.grounder_objective``: SFT or GRPO; a curriculum phase may set either): ``objectives`` gives the names an
iteration trains by, ``run_objectives`` those of every iteration of a run, for every label that names a trainer
(the pipeline's cards, the Metrics charts, the Run tab's loss chart)."""

from __future__ import annotations

import shlex
from typing import Any

from engine.config import RunConfig
from engine.errors import ConfigError
from engine.ledger import active_seconds
from engine.schedule import iteration_config
from engine.store import Store
from engine.stored_config import stored_config

# The stages that commit their rows batch by batch (``engine.stages.context.pending_batches``): stopped or killed,
# they resume from the rows stored. Each: (table, one row, several rows) for the line that says what was kept.
KEPT_ROWS = {"sample": ("plans", "plan", "plans"), "score": ("scores", "score", "scores"),
             "ground": ("groundings", "grounding", "groundings"), "critique": ("verdicts", "verdict", "verdicts")}
# The shown name of each training objective (the config's values are lower case).
OBJECTIVE_NAMES = {"dpo": "DPO", "grpo": "GRPO", "sft": "SFT"}
DEFAULT_OBJECTIVES = {"planner": "DPO", "grounder": "SFT"}
# What a running stage does, for its line beside the status "running" (which a line "running" only repeated).
DOING = {"sample": "sampling plans", "score": "scoring plans by the grounder", "pairs": "building preference pairs",
         "train_planner": "training the planner", "ground": "grounding plans", "critique": "judging the groundings",
         "train_grounder": "training the grounder", "evaluate": "evaluating the agents",
         "warm_start_planner": "warm-starting the planner", "warm_start_grounder": "warm-starting the grounder"}
ERROR_WIDTH = 160  # characters of a failed stage's error in its line, as the stage table's error column cuts it


def _run_config(store: Store, run_id: str | None) -> RunConfig | None:
    run = store.get_run(run_id) if run_id else None
    if run is None:
        return None
    try:
        return stored_config(run.get("config") or {})
    except (ConfigError, TypeError, ValueError):
        return None


def _objectives_of(config: RunConfig | None, iteration: int) -> dict[str, str]:
    if config is None:
        return dict(DEFAULT_OBJECTIVES)
    try:
        stages = iteration_config(config, max(iteration, 1)).stages
    except (ConfigError, TypeError, ValueError):
        stages = config.stages
    return {"planner": OBJECTIVE_NAMES.get(stages.planner_objective, stages.planner_objective.upper()),
            "grounder": OBJECTIVE_NAMES.get(stages.grounder_objective, stages.grounder_objective.upper())}


def objectives(store: Store, run_id: str | None, iteration: int) -> dict[str, str]:
    """``{"planner": "DPO" | "GRPO", "grounder": "SFT" | "GRPO"}``: how the run's config (with the iteration's
    curriculum phase applied) trains each role in ``iteration``; DPO / SFT for a run the store does not have."""
    return _objectives_of(_run_config(store, run_id), iteration)


def run_objectives(store: Store, run_id: str | None) -> dict[str, list[str]]:
    """Each role's objectives over the run's MOAT iterations (one name unless a curriculum changes it), in the
    order they first run; before any iteration, those iteration 1 will use."""
    config = _run_config(store, run_id)
    iterations = [it for it in (store.iterations(run_id) if config is not None else []) if it >= 1] or [1]
    out: dict[str, list[str]] = {"planner": [], "grounder": []}
    for it in iterations:
        for role, name in _objectives_of(config, it).items():
            if name not in out[role]:
                out[role].append(name)
    return out


def _n(value: Any) -> str:
    return f"{int(value):,}" if isinstance(value, (int, float)) else "?"


def _pairs(store: Store, run_id: str, iteration: int, counts: dict[str, Any]) -> str:
    stats = store.query("SELECT count(*) AS n, count(DISTINCT task_id) AS tasks, count(DISTINCT (task_id, step)) AS "
                        "groups, max(step) AS last_step, median(margin) AS margin FROM pairs "
                        "WHERE run_id = ? AND iteration = ?", [run_id, iteration]).iloc[0]
    if not stats["n"]:
        return f"no pair cleared the margin threshold ({_n(counts.get('groups', 0))} task-steps)"
    margin = f"median margin {float(stats['margin']):.2f}"
    if not stats["last_step"]:  # onetime: a task is one group of K plans
        return (f"{_n(stats['n'])} pairs from {_n(stats['tasks'])} tasks, {margin} "
                f"(of {_n(counts.get('groups', stats['tasks']))} task-steps)")
    # Iterative: each step of a task is its own group of K plans, so both counts are task-steps.
    tasks = f"{_n(stats['tasks'])} task{'s' if int(stats['tasks']) != 1 else ''}"
    return (f"{_n(stats['n'])} pairs from {_n(stats['groups'])} of {_n(counts.get('groups', stats['groups']))} "
            f"task-steps ({tasks}), {margin}")


def _critique(store: Store, run_id: str, iteration: int, counts: dict[str, Any]) -> str:
    statuses = store.query("SELECT status, count(*) AS n FROM verdicts WHERE run_id = ? AND iteration = ? "
                           "GROUP BY status ORDER BY n DESC, status", [run_id, iteration])
    parts = ", ".join(f"{int(r.n):,} {r.status}" for r in statuses.itertuples(index=False))
    line = f"{_n(counts.get('rows'))} verdicts" + (f": {parts}" if parts else "")
    trained = (store.stage_status(run_id, iteration).get("train_grounder") or {}).get("status")
    if "error" in set(statuses["status"]) and trained not in ("running", "done"):  # the way on, while it is open
        line += (f"; `python -m engine step critique --db {shlex.quote(str(store.path))} --run {run_id} "
                 f"--iteration {iteration} --retry-errors`, with the studio stopped (one process per store), "
                 "judges the errors again")
    return line


def _evaluate(store: Store, run_id: str, iteration: int, counts: dict[str, Any]) -> str:
    accuracy = store.query("SELECT split, value FROM metrics WHERE run_id = ? AND iteration = ? AND domain = 'all' "
                           "AND name = 'accuracy' ORDER BY split", [run_id, iteration])
    parts = ", ".join(f"{r.split.replace('_', '-')} {100 * r.value:.1f}%" for r in accuracy.itertuples(index=False))
    reused = (f" (reused from run {counts['reused_from']}: the same agents, tasks, settings and machine)"
              if counts.get("reused_from") else "")
    return f"{_n(counts.get('rows'))} tasks evaluated" + (f": {parts}" if parts else "") + reused


def _training(what: str, counts: dict[str, Any]) -> str:
    if counts.get("note"):
        return str(counts["note"])
    rows = _n(counts.get("rows"))
    if "original_rows" in counts:
        rows += f" rows ({_n(counts.get('new_rows'))} new + {_n(counts['original_rows'])} original)"
    else:
        rows += " rows"
    precision = f", {counts['precision']}" if counts.get("precision") else ""
    workers = counts.get("rank_steps") or {}
    if len(workers) > 1:
        steps = sorted(set(workers.values()))
        precision += f", {len(workers)} workers at {'/'.join(map(str, steps))} step(s)"
    curated = {k: v for k, v in (counts.get("curation") or {}).items() if k != "newest_override" and v}
    if curated:  # DPO read the pairs with curator actions applied
        precision += ", curated: " + ", ".join(f"{n} {action}" for action, n in curated.items())
    return f"{what} on {rows}{precision}"


def _grpo(counts: dict[str, Any], unit: str = "tasks") -> str:
    """"GRPO on 96 tasks: 768 rollouts, mean reward -1.82 (gap, execution, format), 12 groups without signal"."""
    if counts.get("note"):
        return str(counts["note"])
    mean = counts.get("mean_reward")
    flat = counts.get("zero_advantage_groups")
    return (f"GRPO on {_n(counts.get('rows'))} {unit}: {_n(counts.get('rollouts'))} rollouts"
            + (f", mean reward {mean:.2f} ({', '.join(counts.get('rewards') or [])})" if mean is not None else "")
            + (f", {flat} groups without signal" if flat else "")
            + (f", {counts['precision']}" if counts.get("precision") else "")
            + (f"; {counts['left_out_note']}" if counts.get("left_out_note") else ""))


def shown_status(status: str, live: bool) -> str:
    """The state the Run tab shows: a stage stored ``running`` that no job of this studio runs (``live`` False) was
    interrupted (a killed process: this studio holds the file, so nobody else can be running it)."""
    return "interrupted" if status == "running" and not live else status


def stage_seconds(row: dict[str, Any]) -> float | None:
    """A finished stage's wall time in seconds (one decimal), every span it ran counted (a stop and its resume, a
    critique judged again: ``engine.ledger.active_seconds``); None while it has not finished."""
    seconds = active_seconds(row)
    return None if seconds is None else round(seconds, 1)


def stage_summary(store: Store, run_id: str, iteration: int, stage: str, status: str,
                  counts: dict[str, Any] | None, error: str | None = None, doing: str | None = None) -> str:
    """The Run tab's line for one stage (see the module docstring); with a shared base (``agents.topology =
    shared``) the line also says what the one model held. ``error``: the stage's recorded error, for a failed stage
    without counts (the stage table leaves it out: its own column shows the error); ``doing``: the worker's last
    progress message for a running stage (``running_line``)."""
    if status == "running":
        return running_line(stage, doing)
    if status == "failed" and not counts:
        return error_line(error)
    line = _stage_line(store, run_id, iteration, stage, status, counts or {})
    agents = (counts or {}).get("agents")
    return f"{line}; {agents}" if agents and status == "done" else line


def running_line(stage: str, doing: str | None = None) -> str:
    """A running stage's line: what it does (``DOING``) and, when given, the worker's last progress message for it
    ("sampling plans: 12 plans", "training the planner: loss 0.41"). The messages that open and close a stage
    ("started: torch threads ...", "done") say nothing the status and the bar do not."""
    what = DOING.get(stage, "")
    message = " ".join(str(doing or "").split())
    if not message or message == "done" or message.startswith("started"):
        return what
    return f"{what}: {message}" if what else message


def error_line(error: str | None) -> str:
    """A failed stage's line: the first line of its recorded error (the exception's message; the traceback follows
    it), cut to ``ERROR_WIDTH``; "" without one."""
    first = str(error or "").split("\n", 1)[0].strip()
    return first if len(first) <= ERROR_WIDTH else first[:ERROR_WIDTH - 1] + "…"


def resume_line(store: Store, run_id: str, iteration: int, stage: str) -> str:
    """A stopped or interrupted stage's line: what it kept and how it goes on, never its state again (the status
    beside it says that): "12 plans kept; Next stage resumes from them". A stage that commits its rows batch by batch
    (``KEPT_ROWS``) resumes from the ones stored; any other (training, pairs, evaluation) starts over."""
    if stage not in KEPT_ROWS:
        return "nothing kept: Next stage runs it again from the start"
    table, one, many = KEPT_ROWS[stage]
    kept = store.count(table, run_id, iteration)
    if not kept:
        return "nothing kept yet: Next stage runs it from the start"
    return f"{_n(kept)} {one if kept == 1 else many} kept; Next stage resumes from them"


def _stage_line(store: Store, run_id: str, iteration: int, stage: str, status: str, counts: dict[str, Any]) -> str:
    if status == "skipped":
        return f"skipped: {counts.get('note', '')}".rstrip(": ")
    if status in ("stopped", "interrupted"):  # counts a stopped redo left are the first run's: not what it kept
        return resume_line(store, run_id, iteration, stage)
    if status == "pending":
        return ""  # the status says it waits: "waiting" beside "pending" only repeated it
    if stage == "sample":
        return f"{_n(counts.get('rows'))} plans sampled"
    if stage == "score":
        return f"{_n(counts.get('rows'))} plans scored by the grounder"
    if stage == "pairs":
        line, planner = _pairs(store, run_id, iteration, counts), objectives(store, run_id, iteration)["planner"]
        # GRPO makes its own rollouts: the pairs are there to read and curate, not what the planner trains on
        return line if planner == "DPO" else f"{line}; not trained on: the planner learns by {planner}"
    if stage == "ground":
        return f"{_n(counts.get('rows'))} plans grounded"
    if stage == "critique":
        return _critique(store, run_id, iteration, counts)
    if stage == "evaluate":
        return _evaluate(store, run_id, iteration, counts)
    if stage in ("train_planner", "train_grounder"):  # what ran (its counts), else what the config says
        role = "planner" if stage == "train_planner" else "grounder"
        name = OBJECTIVE_NAMES.get(str(counts.get("objective") or ""), objectives(store, run_id, iteration)[role])
        if name == "GRPO":
            return _grpo(counts, "tasks" if role == "planner" else "grounded plans")
        return _training(name, counts)
    if stage == "warm_start_planner":
        return _training("warm-start SFT", counts)
    if stage == "warm_start_grounder":
        return _training("SFT", counts)
    return ", ".join(f"{k} {v}" for k, v in counts.items() if k != "agents")


def skipped_reason(store: Store, run_id: str | None, iteration: int | None, stage: str) -> str | None:
    """Why ``stage`` of ``run_id``'s ``iteration`` was skipped (its recorded note, e.g. "no critic
    (stages.grounder_data = raw): ..."; "" when none was recorded), or None when it was not skipped or has no record
    yet. The queues and charts a skipped stage would fill say this rather than "none yet"."""
    if not run_id or iteration is None:
        return None
    return skip_note(store.stage_status(run_id, int(iteration)).get(stage))


def skip_note(record: dict[str, Any] | None) -> str | None:
    """``skipped_reason`` of one ``Store.stage_status`` record (None: no record, or not skipped)."""
    if not record or record["status"] != "skipped":
        return None
    return str((record["counts"] or {}).get("note") or "")
