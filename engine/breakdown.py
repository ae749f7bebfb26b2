"""Where an experiment's accuracy comes from, one group of tasks at a time: its stored evaluation traces of one split,
grouped by template, per variant and iteration, over seeds.

Contract: ``template_breakdown(store, experiment_id, split="held_out") -> dict`` reads only the store
(``experiments``, ``experiment_runs``, ``eval_traces``, ``tasks``) and returns a JSON-ready dict; it raises
``engine.report.UnknownExperiment`` for an id the store lacks. Shape::

    {"experiment", "split", "variants": {"<variant>": {"groups": {"<group>": {"domain", "tasks",
        "iterations": {"<t>": {"accuracy": S, "sound_plans": S, "vague_plans": S, "gold_logppl": S}}}}}}}

A task's group is its ``meta["template"]`` (the demo world's templates), else its ``source``. ``S`` is
``engine.stats.mean_interval`` over the seeds' per-run values (fractions; ``gold_logppl`` is the mean log-PPL of the
gold actions under the planner's greedy plan, the capability gap per task) plus ``per_seed``, its interval cut to the
quantity's range (``engine.report.summary``). A greedy plan is *sound* as the reference critic judges it
(``engine.critics.reference.plan_is_sound``): one subgoal per gold step, each one of its step's renderings where the
task lists them, else only the step count. The critic accepts the *vague* rendering ("Look it up.") as sound, so
``vague_plans`` counts the greedy plans with a step in it (``has_vague_step``). So a group whose accuracy does not move
while its sound-plan share stays low, or its vague share high, is held back by the planner; a group with sound,
specific plans and low accuracy, by the grounder. ``breakdown_markdown`` prints, per variant, the first and the last
iteration of every group side by side. ``evaluated_splits(store, experiment_id)`` lists the splits the experiment's
runs have traces of (held-out, dev, held-in first), for a picker.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from engine.critics.reference import plan_is_sound
from engine.dbutil import loads, records
from engine.report import UnknownExperiment, clean, known_experiments, summary
from engine.store import Store
from engine.tasks import Task


def has_vague_step(task: Task, subgoals: list[str]) -> bool:
    """Whether a plan words some step in its *vague* rendering (``meta["vague_subgoals"]``, the demo world's "Look it
    up."), which the reference critic accepts as sound but which tells the grounder nothing; a vague wording that is
    also the step's concrete one does not count."""
    vague = task.meta.get("vague_subgoals") if isinstance(task.meta, dict) else None
    if not vague:
        return False
    gold = task.gold_subgoals
    return any(i < len(vague) and text == vague[i] and (i >= len(gold) or text != gold[i])
               for i, text in enumerate(subgoals))


def _group(meta: dict[str, Any], source: str) -> str:
    template = meta.get("template") if isinstance(meta, dict) else None
    return str(template) if template else source


SPLIT_ORDER = ("held_out", "dev", "held_in")


def evaluated_splits(store: Store, experiment_id: str) -> list[str]:
    """The splits the experiment's runs have evaluation traces of: held-out, dev, held-in, then any other by name."""
    df = store.query("SELECT DISTINCT e.split FROM experiment_runs r JOIN eval_traces e USING (run_id) "
                     "WHERE r.experiment_id = ?", [experiment_id])
    found = {str(row["split"]) for row in records(df)}
    return [s for s in SPLIT_ORDER if s in found] + sorted(found - set(SPLIT_ORDER))


def template_breakdown(store: Store, experiment_id: str, split: str = "held_out") -> dict[str, Any]:
    """Per variant, group and iteration: accuracy, sound and vague plan shares and gold log-PPL over seeds (module
    docstring)."""
    found = records(store.query("SELECT config_json FROM experiments WHERE experiment_id = ?", [experiment_id]))
    if not found:
        raise UnknownExperiment(experiment_id, known_experiments(store))
    order = list(loads(found[0]["config_json"], {}).get("variants", {}))
    df = store.query(
        "SELECT r.variant, r.seed, e.iteration, e.correct, e.gold_logppl, e.trace_json, t.task_id, t.domain, "
        "t.source, t.gold_subgoals_json, t.meta_json FROM experiment_runs r "
        "JOIN eval_traces e USING (run_id) JOIN tasks t ON t.run_id = e.run_id AND t.task_id = e.task_id "
        "WHERE r.experiment_id = ? AND e.split = ?", [experiment_id, split])
    # sums[variant][group][iteration][seed] = [n, correct, sound, logppl sum, logppl n, vague]
    sums: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(lambda: defaultdict(
        lambda: [0, 0, 0, 0.0, 0, 0]))))
    info: dict[str, dict[str, Any]] = {}
    for row in records(df):
        meta = loads(row["meta_json"], {})
        group = _group(meta, row["source"])
        task = Task(id=row["task_id"], domain=row["domain"], source=row["source"], split=split, question="",
                    gold_subgoals=loads(row["gold_subgoals_json"], []), meta=meta)
        subgoals = json.loads(row["trace_json"]).get("subgoals") or []
        cell = sums[row["variant"]][group][int(row["iteration"])][int(row["seed"])]
        cell[0] += 1
        cell[1] += bool(row["correct"])
        cell[2] += plan_is_sound(task, 0, list(subgoals))
        cell[5] += has_vague_step(task, list(subgoals))
        if row["gold_logppl"] is not None:
            cell[3] += float(row["gold_logppl"])
            cell[4] += 1
        seen = info.setdefault(group, {"domain": row["domain"], "tasks": set()})
        seen["tasks"].add(row["task_id"])
    variants: dict[str, Any] = {}
    for variant in sorted(sums, key=lambda v: (order.index(v) if v in order else len(order), v)):
        groups: dict[str, Any] = {}
        for group in sorted(sums[variant], key=lambda g: (info[g]["domain"], g)):
            its: dict[str, Any] = {}
            for t, per_seed in sorted(sums[variant][group].items()):
                its[str(t)] = {
                    "accuracy": summary({s: c[1] / c[0] for s, c in per_seed.items()}, "accuracy"),
                    "sound_plans": summary({s: c[2] / c[0] for s, c in per_seed.items()}, "sound_plans"),
                    "vague_plans": summary({s: c[5] / c[0] for s, c in per_seed.items()}, "vague_plans"),
                    "gold_logppl": summary({s: c[3] / c[4] for s, c in per_seed.items() if c[4]}, "gold_logppl"),
                }
            groups[group] = {"domain": info[group]["domain"], "tasks": len(info[group]["tasks"]), "iterations": its}
        variants[variant] = {"groups": groups}
    return clean({"experiment": experiment_id, "split": split, "variants": variants})


def _cell(stat: dict[str, Any] | None, scale: float, digits: int) -> str:
    if not stat or stat.get("mean") is None:
        return "—"
    lo, hi = stat.get("ci95") or [None, None]
    mean = f"{stat['mean'] * scale:.{digits}f}"
    if lo is None or hi is None or lo == hi:
        return mean
    return f"{mean} [{lo * scale:.{digits}f}, {hi * scale:.{digits}f}]"


def breakdown_markdown(breakdown: dict[str, Any]) -> str:
    """One table per variant: every group's accuracy %, sound and vague plans % and gold log-PPL at the first and last
    iteration (mean [95% interval] over seeds)."""
    lines = [f"**{breakdown['split']} by template**, experiment `{breakdown['experiment']}` (mean [95% interval] "
             f"over seeds; sound plans as the reference critic judges them)", ""]
    for variant, body in breakdown["variants"].items():
        iterations = sorted({int(t) for g in body["groups"].values() for t in g["iterations"]})
        first, last = (str(iterations[0]), str(iterations[-1])) if iterations else ("0", "0")
        lines += [f"*{variant}* (iteration {first} -> {last})", "",
                  "| template | domain | tasks | accuracy % | sound plans % | vague plans % | gold log-PPL |",
                  "|---|---|---|---|---|---|---|"]
        for group, g in body["groups"].items():
            a, b = g["iterations"].get(first), g["iterations"].get(last)
            cols = [f"{_cell((a or {}).get(m), s, d)} -> {_cell((b or {}).get(m), s, d)}"
                    for m, s, d in (("accuracy", 100, 1), ("sound_plans", 100, 0), ("vague_plans", 100, 0),
                                    ("gold_logppl", 1, 3))]
            lines.append(f"| {group} | {g['domain']} | {g['tasks']} | " + " | ".join(cols) + " |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
