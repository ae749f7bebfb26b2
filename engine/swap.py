"""The planner x grounder swap table: which stage of MOAT moved the accuracy, found by swapping trained agents.

Contract: ``swap_table(store, run_id, base=0, after=None)`` evaluates, on exactly the run's evaluation tasks (the
evaluate stage's selection: ``runtime.pick_eval_tasks`` with ``evaluate.splits``, ``data.eval_limit`` and
``data.eval_seed``), greedily and with the run's ``evaluate`` settings:

* every cell ``P{a}G{b}``, a and b in {base, after}: the planner after iteration a with the grounder after iteration
  b (t = 0: the run's starting agents; t >= 1: the checkpoints iteration t recorded, i.e. the agents iteration t + 1
  starts from, ``agent_after``);
* ``G{b}``: each of the two grounders alone on the gold plans (``task.gold_subgoals``; tasks without them are left
  out), with the capability gap measured as the grounder's PPL of the gold actions given the gold plans.

``after`` defaults to the last iteration whose evaluate stage is done. A diagonal cell ``P{t}G{t}`` is what the
evaluate stage of iteration t measured (same agents, same tasks, same greedy decoding): when that stage is done and
its traces cover the tasks, its ``metrics`` (the cell) and ``eval_traces`` (the per-task outcomes) are reused and
listed in ``reused``. With ``evaluate.reuse`` on, every other cell is looked up in, and once computed kept in, the
evaluation cache of ``run.workdir`` (``engine.eval_cache``, keyed by the agents' files, the tasks, the settings, the
software and the hardware): the starting grounder on gold plans (``G0``) is the same computation in every run of an
experiment, so only the first run's table computes it; a cell found there is listed in ``reused`` and in
``reused_from`` (cell -> the run, iteration and cell that computed it). ``reuse=False`` recomputes every cell and
keeps nothing. Each model is loaded once and dropped after its last cell.

Rows go to ``swaps`` (``planner_after`` = -1 for gold plans): per split and domain (and "all") every metric of
``engine.evaluate.summarize`` (accuracy, accuracy_lo/_hi, n, correct, gap_logppl, gap_ppl, ...), and on every
cell but the base one the exact McNemar test (``engine.stats.mcnemar``) against the base on the same tasks:
``mcnemar_gained``, ``mcnemar_lost``, ``mcnemar_p`` (P{a}G{b} against P{base}G{base}; G{after} against G{base}).
The run's rows of every written (planner_after, grounder_after) are replaced in one transaction, after all cells are
computed (a stop, ``should_stop`` polled before each computed cell and between its generation and scoring batches,
raises ``StageStopped`` and writes nothing, in the store or the cache); the computed cells go to the evaluation cache
after that transaction, so an entry never precedes the table it came from. A cell that cannot be kept says why in
``not_kept`` (an unwritable workdir) or ``not_reusable`` (``engine.eval_cache.evaluation_key``'s reason: a hub id, a
remote QA model, a shared base).
Per-task outcomes are returned, not stored in the store: greedy decoding on a fixed task order recomputes them, a
diagonal's are in ``eval_traces``, and a kept cell's in its cache entry.

Returns ``{"run_id", "base", "after", "agents": {"P0": path, ...}, "warm_started": [the roles whose starting agent
(iteration 0) is the checkpoint ``[warm_start]`` trained, not the model as loaded], "tasks": [task ids], "cells":
{"P{a}G{b}": {split: {domain: {...}}}}, "gold_plans": {"G{b}": {...}}, "tests": {"stage1" | "stage2" | "both" |
"gold_plans": {"label", "after", "before", "results": {split: {domain: {"gained", "lost", "p", "n"}}}}}, "reused":
[cells], "reused_from": {cell: origin}, "not_kept": {cell: why}, "not_reusable": {cell: why}, "outcomes": {cell:
{task_id: correct}}, "seconds"}``.
Raises ``SwapError`` for an unknown run, an ``after`` without a done evaluate stage, ``base`` not in 0..after-1,
or a run whose two roles are one set of weights (``swap_refusal``: ``agents.topology = "shared"`` without LoRA, where
either role's training changes both, so no planner of one iteration exists beside a grounder of another). Before
loading any model, the model directories of both agents after each iteration a computed cell uses must be there (as
``python -m engine step evaluate`` of that iteration checks them: ``engine.preflight.check_stage_agents``), else
``CheckpointError`` names the first one missing and where it came from; a relative path is relative to the working
directory.

``stored_swaps(store, run_id, base=None, after=None)`` only reads: the stored table of a run in the same shape
(``"cells"``, ``"gold_plans"``, ``"tests"`` with the McNemar rows as ``{"gained", "lost", "p"}``, plus ``"base"``,
``"after"`` and ``"iterations"``, every iteration the run's swaps name), or None when the run has no swap rows.
``after`` defaults to the largest iteration stored, ``base`` to the smallest; a cell or test that is not stored is
absent, and so is a test of P{after}G{after} or G{after} stored against another base (the table written last, e.g. by
``--base 1``, replaced those two cells' tests: they are kept only when written with P{after}G{base}).
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

from engine import eval_cache
from engine.config import RunConfig
from engine.dbutil import records
from engine.eval_cache import StoredEvaluation, evaluation_key
from engine.evaluate import Trace, evaluate, gold_logppl, ground_plans, summarize, summary_from_rows
from engine.loop import run_config, run_directory
from engine.outcome import Toolbox, toolbox_for
from engine.preflight import check_stage_agents
from engine.runtime import pick_eval_tasks
from engine.stages.context import ProgressSink, StageContext, one_set_of_weights
from engine.stats import mcnemar
from engine.stop_check import stop_checked
from engine.store import Store
from engine.tasks import Task

GOLD = -1  # planner_after of the grounder-on-gold-plans rows
Summary = dict[str, dict[str, dict[str, Any]]]  # split -> domain -> metric -> value
Outcomes = dict[str, bool]  # task_id -> correct


class SwapError(ValueError):
    """A swap table that cannot be built as asked (unknown run, iteration not evaluated, bad base/after)."""


def cell_name(planner_after: int, grounder_after: int) -> str:
    """``P1G0`` for a planner/grounder cell, ``G1`` for a grounder on gold plans."""
    return f"G{grounder_after}" if planner_after == GOLD else f"P{planner_after}G{grounder_after}"


def agent_after(ctx: StageContext, role: str, t: int) -> str:
    """The checkpoint of the planner/grounder after iteration ``t`` (0: the run's starting agent): the one iteration
    t + 1 starts from, as the evaluate stage of iteration t resolves it."""
    return ctx.agent_path(role, t + 1)


def swap_refusal(config: RunConfig) -> str | None:
    """Why a run of ``config`` has no swap table, or None. With one set of weights in both roles (the shared
    topology without LoRA) the planner after iteration t *is* the grounder after iteration t, trained by DPO and SFT
    alike, so "P1 G0" would not be stage 1's planner beside the starting grounder: both stages are in both agents."""
    if not one_set_of_weights(config):
        return None
    return ("its planner and grounder are one set of weights (agents.topology = \"shared\" without LoRA), which "
            "both stages train in turn: stage 1's planner cannot be swapped apart from stage 2's grounder. Give "
            "each role its own weights (agents.topology = \"separate\") or its own LoRA adapters on the shared base "
            "(dpo.lora or grpo.lora, and sft.lora) to attribute the gain to a stage")


def evaluated_iterations(store: Store, run_id: str) -> list[int]:
    """Iterations of the run whose evaluate stage is done, ascending."""
    return [t for t in store.iterations(run_id)
            if store.stage_status(run_id, t).get("evaluate", {}).get("status") == "done"]


def _stored_cell(store: Store, run_id: str, t: int, task_ids: list[str]) -> tuple[Summary, Outcomes] | None:
    """The evaluate stage's metrics and per-task outcomes of iteration ``t``, if they cover exactly ``task_ids``."""
    metrics = store.frame("metrics", run_id, t)
    traces = store.frame("eval_traces", run_id, t)
    if not len(metrics) or sorted(traces.task_id) != sorted(task_ids):
        return None
    return summary_from_rows(records(metrics)), {tid: bool(c) for tid, c in zip(traces.task_id, traces.correct)}


def cell_tasks(planner_after: int, tasks: list[Task]) -> list[Task]:
    """The tasks a cell evaluates: a gold-plans cell only those with gold subgoals."""
    return [t for t in tasks if t.gold_subgoals] if planner_after == GOLD else tasks


def _compute_cell(ctx: StageContext, planner_after: int, grounder_after: int, tasks: list[Task],
                  toolbox: Toolbox) -> tuple[Summary, list[Trace]]:
    settings = ctx.config.evaluate
    grounder = ctx.agent("grounder", iteration=grounder_after + 1)  # the agent after t = what t + 1 starts from
    tasks = cell_tasks(planner_after, tasks)
    if planner_after == GOLD:
        plans = [t.gold_subgoals for t in tasks]
        traces = ground_plans(grounder, tasks, plans, settings, toolbox)
        for trace, value in zip(traces, gold_logppl(grounder, tasks, plans, settings.batch_size)):
            trace.gold_logppl = value if value == value else None
        summary = summarize(traces)
    else:
        planner = ctx.agent("planner", iteration=planner_after + 1)
        summary, traces = evaluate(planner, grounder, tasks, settings, toolbox=toolbox)
    return summary, traces


def paired_tests(before: Outcomes, after: Outcomes, tasks: list[Task]) -> dict[str, dict[str, dict[str, Any]]]:
    """Exact McNemar of ``after`` vs ``before`` per split and domain (and "all") on the tasks both have."""
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for t in tasks:
        if t.id in before and t.id in after:
            groups[(t.split, t.domain)].append(t.id)
            groups[(t.split, "all")].append(t.id)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for (split, domain), ids in sorted(groups.items()):
        out.setdefault(split, {})[domain] = mcnemar([before[i] for i in ids], [after[i] for i in ids])
    return out


def _rows(run_id: str, cell: tuple[int, int], summary: Summary,
          test: dict[str, dict[str, dict[str, Any]]] | None) -> list[dict[str, Any]]:
    values = [(split, domain, name, value) for split, domains in summary.items()
              for domain, metrics in domains.items() for name, value in metrics.items()]
    values += [(split, domain, f"mcnemar_{key}", result[key]) for split, domains in (test or {}).items()
               for domain, result in domains.items() for key in ("gained", "lost", "p")]
    return [{"run_id": run_id, "planner_after": cell[0], "grounder_after": cell[1], "split": split,
             "domain": domain, "name": name, "value": float(value)} for split, domain, name, value in values]


def swap_table(store: Store, run_id: str, base: int = 0, after: int | None = None, *, reuse: bool = True,
               progress: ProgressSink | None = None, should_stop: Callable[[], bool] | None = None) -> dict[str, Any]:
    """Build, store and return the swap table of ``run_id``; see the module docstring."""
    started = time.perf_counter()
    if store.get_run(run_id) is None:
        raise SwapError(store.unknown_run(run_id))
    config = run_config(store, run_id)
    refusal = swap_refusal(config)
    if refusal:  # before the iterations: no later evaluation would make such a run's table mean anything
        raise SwapError(f"run {run_id} has no swap table: {refusal}")
    evaluated = evaluated_iterations(store, run_id)
    if after is None:
        if not evaluated:
            raise SwapError(f"run {run_id} has no iteration whose evaluate stage is done")
        after = evaluated[-1]
        if after <= base:  # a run stopped before its first iteration was evaluated: say so, not "after - 1 = -1"
            raise SwapError(f"run {run_id} has iteration {base} evaluated but no later one: the swap table compares "
                            f"the agents of iteration {base} with those of a later evaluated iteration (evaluated: "
                            f"{', '.join(map(str, evaluated))}); finish an iteration first (python -m engine run "
                            f"--run {run_id})")
    elif after not in evaluated:
        done = ", ".join(map(str, evaluated)) or "none"
        raise SwapError(f"iteration {after} of run {run_id} has no done evaluate stage (evaluated: {done})")
    if not 0 <= base < after:
        raise SwapError(f"base must be an iteration from 0 to after - 1 = {after - 1}, got {base}")
    ctx = StageContext(store, run_id, after, config, run_directory(store, run_id))
    ctx.begin(after, "swap", progress, should_stop or (lambda: False))
    tasks = pick_eval_tasks(store.get_tasks(run_id), config.evaluate.splits, config.data.eval_limit,
                            config.data.eval_seed)
    task_ids = [t.id for t in tasks]

    # Grouped by grounder, so each model is loaded once and the fewest are held at a time.
    order = [(base, base), (after, base), (GOLD, base), (after, after), (base, after), (GOLD, after)]
    results: dict[tuple[int, int], tuple[Summary, Outcomes]] = {}
    reused: list[str] = []
    for a, b in order:
        stored = _stored_cell(store, run_id, a, task_ids) if reuse and a == b and a in evaluated else None
        if stored is not None:
            results[(a, b)] = stored
            reused.append(cell_name(a, b))
    todo = [cell for cell in order if cell not in results]
    paths = {(role, t): agent_after(ctx, role, t) for role in ("planner", "grounder") for t in (base, after)}

    def models_of(a: int, b: int) -> list[str]:
        return [paths["grounder", b]] + ([paths["planner", a]] if a != GOLD else [])

    uses = Counter(path for cell in todo for path in models_of(*cell))
    for t in sorted({t for a, b in todo for t in (a, b) if t != GOLD}):
        # The agents after t are what the evaluate stage of t loads: a relative path resolved from another working
        # directory, or a deleted checkpoint, is named here instead of failing inside transformers.
        check_stage_agents(store, run_id, t, "evaluate", config)
    toolbox = toolbox_for(config.tools)
    cache = eval_cache.for_workdir(config.run.workdir) if reuse and config.evaluate.reuse else None
    reused_from: dict[str, str] = {}
    not_reusable: dict[str, str] = {}
    to_keep: list[tuple[str, str, StoredEvaluation]] = []  # (cell, key, entry), kept once the table is stored
    for done, (a, b) in enumerate(todo):
        ctx.check_stop()
        name = cell_name(a, b)
        key = None
        if cache is not None:
            key, why = evaluation_key(config, None if a == GOLD else paths["planner", a], paths["grounder", b],
                                      cell_tasks(a, tasks), gold_plans=a == GOLD)
            if key is None:
                not_reusable[name] = why or ""
        kept = cache.get(key) if cache is not None and key else None
        if kept is not None:
            ctx.report(done, len(todo), f"reusing {name} from run {kept.origin()}")
            results[(a, b)] = kept.summary(), kept.outcomes()
            reused.append(name)
            reused_from[name] = kept.origin()
        else:
            ctx.report(done, len(todo), f"evaluating {name}")
            with stop_checked(ctx.check_stop):  # within a cell too: each is a whole evaluation (engine.stop_check)
                summary, traces = _compute_cell(ctx, a, b, tasks, toolbox)
            results[(a, b)] = summary, {t.task_id: t.correct for t in traces}
            if key:
                to_keep.append((name, key, StoredEvaluation.from_traces(summary, traces, run_id, after, cell=name)))
        for path in models_of(a, b):
            uses[path] -= 1
            if not uses[path]:
                ctx.forget_agent(path)
    ctx.forget_agents()

    comparisons = {"stage1": ("stage 1 alone", (after, base), (base, base)),
                   "stage2": ("stage 2 alone", (base, after), (base, base)),
                   "both": ("both stages", (after, after), (base, base)),
                   "gold_plans": ("grounder on gold plans", (GOLD, after), (GOLD, base))}
    tests: dict[str, Any] = {}
    by_cell: dict[tuple[int, int], dict[str, dict[str, dict[str, Any]]]] = {}
    for key, (label, new, old) in comparisons.items():
        by_cell[new] = paired_tests(results[old][1], results[new][1], tasks)
        tests[key] = {"label": label, "after": cell_name(*new), "before": cell_name(*old), "results": by_cell[new]}

    rows = [row for cell in order for row in _rows(run_id, cell, results[cell][0], by_cell.get(cell))]
    deletes = [("swaps", {"run_id": run_id, "planner_after": a, "grounder_after": b}) for a, b in order]
    store.write_batch([("swaps", rows)], deletes=deletes)
    not_kept: dict[str, str] = {}
    for name, key, entry in to_keep if cache is not None else []:
        try:
            cache.put(key, entry)
        except OSError as exc:  # an unwritable workdir costs a later table this cell, not this table its rows
            not_kept[name] = f"{cache.directory}: {exc.strerror or exc}"
    ctx.report(len(todo), len(todo), "done")
    return {
        "run_id": run_id, "base": base, "after": after,
        "agents": {f"{role[0].upper()}{t}": path for (role, t), path in paths.items()},
        # Iteration 0's agents are the models as loaded unless the warm start recorded checkpoints for them.
        "warm_started": [role for role in ("planner", "grounder") if store.checkpoint(run_id, 0, role)],
        "tasks": task_ids,
        "cells": {cell_name(*cell): results[cell][0] for cell in [(base, base), (after, base), (base, after),
                                                                   (after, after)]},
        "gold_plans": {cell_name(a, b): results[(a, b)][0] for a, b in order if a == GOLD},
        "tests": tests,
        "reused": reused,
        "reused_from": reused_from,
        "not_kept": not_kept,
        "not_reusable": not_reusable,
        "outcomes": {cell_name(*cell): results[cell][1] for cell in order},
        "seconds": round(time.perf_counter() - started, 2),
    }


def stored_swaps(store: Store, run_id: str, base: int | None = None, after: int | None = None
                 ) -> dict[str, Any] | None:
    """The run's stored swap table (see the module docstring); None when ``swaps`` has no row of the run."""
    df = store.query("SELECT planner_after, grounder_after, split, domain, name, value, created_at FROM swaps "
                     "WHERE run_id = ? ORDER BY planner_after, grounder_after, split, domain, name", [run_id])
    if not len(df):
        return None
    stored: dict[str, Summary] = defaultdict(dict)
    results: dict[str, dict[str, dict[str, dict[str, Any]]]] = defaultdict(dict)
    written: dict[tuple[int, int], Any] = {}  # cell -> when its rows were written (one table = one transaction)
    for a, b, split, domain, name, value, created_at in df.itertuples(index=False):
        written[int(a), int(b)] = max(written.get((int(a), int(b)), created_at), created_at)
        cell = cell_name(int(a), int(b))
        if name.startswith("mcnemar_"):
            key = name.removeprefix("mcnemar_")
            results[cell].setdefault(split, {}).setdefault(domain, {})[key] = value if key == "p" else int(value)
        else:
            stored[cell].setdefault(split, {}).setdefault(domain, {})[name] = (
                int(value) if name in ("n", "correct") else float(value))
    iterations = sorted({int(t) for t in df.planner_after if t != GOLD} | {int(t) for t in df.grounder_after})
    after = iterations[-1] if after is None else after
    base = iterations[0] if base is None else base
    order = [(base, base), (after, base), (base, after), (after, after)]
    comparisons = {"stage1": ("stage 1 alone", (after, base), (base, base)),
                   "stage2": ("stage 2 alone", (base, after), (base, base)),
                   "both": ("both stages", (after, after), (base, base)),
                   "gold_plans": ("grounder on gold plans", (GOLD, after), (GOLD, base))}
    # P{after}G{after} and G{after} on gold plans are written by every table with that ``after``, whatever its base,
    # so their McNemar rows are against the base of the table written last: that table wrote its P{after}G{base} in
    # the same transaction. Against another base (``swap --base 1`` after ``--base 0``) the test is not shown: it
    # was labelled "vs P0G0" while counting the changes from P1G1.
    def against_base(key: str, cell: tuple[int, int]) -> bool:
        return key in ("stage1", "stage2") or (after, base) in written and written[after, base] == written.get(cell)

    tests = {key: {"label": label, "after": cell_name(*new), "before": cell_name(*old),
                   "results": results[cell_name(*new)]}
             for key, (label, new, old) in comparisons.items()
             if cell_name(*new) in results and against_base(key, new)}
    return {"run_id": run_id, "base": base, "after": after, "iterations": iterations,
            "cells": {cell_name(*c): stored[cell_name(*c)] for c in dict.fromkeys(order) if cell_name(*c) in stored},
            "gold_plans": {cell_name(GOLD, b): stored[cell_name(GOLD, b)] for b in dict.fromkeys((base, after))
                           if cell_name(GOLD, b) in stored},
            "tests": tests}
