"""An experiment's runs aggregated over seeds: means, 95% intervals, paired tests, wall times.

Contract: ``experiment_report(store, experiment_id) -> dict`` reads only the store (``experiments``,
``experiment_runs``, ``metrics``, ``stages``) and returns a JSON-ready dict (no NaN: a value that cannot be computed
is absent or null); ``UnknownExperiment`` (a ``KeyError`` carrying the known ids) when the id is not there.
``engine.report_markdown.report_markdown(report)`` renders the same numbers as tables. Shape::

    {"experiment", "name", "source", "baseline", "seeds", "iterations_requested",
     "variants": {"<variant>": {"iterations": {"<t>": {
         "seeds": [...],                                   # the seeds that have metrics at iteration t
         "held_in_accuracy": S, "held_out_accuracy": S, "held_out_gap_ppl": S, "held_out_gap_logppl": S,
         "held_in_gap_ppl": S, ..., "dev_accuracy": S,     # split "all"; dev only when evaluated
         "by_domain": {"held_out": {"maths": {"accuracy": S, "gap_ppl": S, ...}, ...}, ...},
         "vs_iteration_0": {"held_in_accuracy": P, "held_out_accuracy": P, "held_out_gap_ppl_pct": P,
                            "held_out_gap_ppl_pct_by_domain": {"maths": P, ...}, ...},  # and held_in_/dev_gap_ppl_pct
         "vs_baseline": {"held_in_accuracy": P, "held_out_accuracy": P, "held_out_gap_ppl": P, ...}}}}},
     "swaps": {"<variant>": {"base", "after", "seeds", "cells": {"P0G0" | "P{N}G0" | "P0G{N}" | "P{N}G{N}" |
         "gold/G0" | "gold/G{N}": {"held_in_accuracy": S, "held_out_accuracy": S, ...}},
         "gains": {"stage1" | "stage2" | "both": {"held_in_accuracy": P, "held_out_accuracy": P}}}},
     "runs": [{"variant", "seed", "run_id", "status", "iterations_done", "wall_s", ...}], "missing": [...],
     "wall_s": {"total", "busy", "per_variant": {...}}}

``S`` = ``engine.stats.mean_interval`` over the seeds' per-run values (``{"mean", "ci95", "n", "sd"}``) plus
``"per_seed"``; accuracies are fractions. An ``S`` interval is cut to the quantity's range (a share to [0, 1], a PPL to
>= 1, a log-PPL to >= 0): a t interval on few seeds can reach past it, and the cut one still covers the mean. ``P`` =
``engine.stats.paired_t`` (``{"diff", "ci95", "p", "n"}``) plus ``"seeds"``, over the seeds both sides have:
``vs_iteration_0`` pairs iteration t with iteration 0 of the same run (for the gap, the per-seed % change of
``gap_ppl``, tested against 0); ``vs_baseline`` pairs a variant with the baseline variant (``full`` unless the file
names another) at the same iteration, and is left out, with ``vs_baseline_refused`` (why) beside the variant's
``iterations``, when the variant's runs evaluate other tasks (``EVALUATION_FIELDS``: data.domains, data.eval_limit,
...). Wall times are the sums of the runs' stage durations, every span a stage ran
(``engine.ledger.active_seconds``: the latest span ``stages.started_at`` .. ``finished_at`` plus ``earlier_s``, the
spans before a stop or failure and its resume); ``busy`` is the clock time during which any of the runs had a stage
under way: the union of the latest spans, plus the earlier spans' seconds counted apart. Only the latest span's clock
times are stored, so an earlier span is taken not to overlap any other: exact for runs one after another, at most
those seconds too many where ``--jobs N`` ran it beside another run (``busy`` never exceeds ``total``). With
``--jobs N`` it is what the runs took, without the idle hours between a kill and its resume, and without the swap
tables, which run after the runs and record no times. A run is ``done`` once its ``evaluate`` stage is
done for every iteration up to the largest requested; others are ``incomplete`` (with the stage where they stand), and
an iteration lists only the seeds that reached it. ``swaps`` aggregates the stored swap tables (``engine.swap``,
written for the variants an experiment's ``swap`` lists) of each variant's runs over seeds: every cell's accuracy
(split "all") as ``S``, and each stage's gain paired over seeds (``P``): stage 1 alone = P{N}G0 vs P0G0, stage 2 alone
= P0G{N} vs P0G0, both = P{N}G{N} vs P0G0, with N the largest iteration whose trained cells every seed's tables
hold (else the largest any seed's hold); every cell and gain is over the seeds that hold N (``seeds``).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from engine.dbutil import loads, records
from engine.stats import mean_interval, paired_t
from engine.store import Store

SPLITS = ("held_in", "held_out", "dev")
NAMES = ("accuracy", "gap_ppl", "gap_logppl")
PAIRED = ("held_in_accuracy", "held_out_accuracy", "dev_accuracy", "held_out_gap_ppl", "held_out_gap_logppl",
          "dev_gap_ppl", "dev_gap_logppl")
# The fields that decide *which tasks* an evaluation scores: runs that differ in any are not paired (a variant with
# data.domains = ["maths"] has its maths-only accuracy paired with the baseline's over every domain otherwise).
EVALUATION_FIELDS = ("data.tasks", "data.format", "data.ground", "data.sources", "data.domains", "data.eval_limit",
                     "data.eval_seed", "evaluate.formulation")


class UnknownExperiment(KeyError):
    def __init__(self, experiment_id: str, known: list[dict[str, Any]]):
        super().__init__(experiment_id)
        self.experiment_id, self.known = experiment_id, known


def known_experiments(store: Store) -> list[dict[str, Any]]:
    df = store.query("SELECT e.experiment_id, e.name, e.created_at, count(r.run_id) AS runs FROM experiments e "
                     "LEFT JOIN experiment_runs r USING (experiment_id) GROUP BY ALL ORDER BY e.created_at")
    return records(df)


def clean(value: Any) -> Any:
    """JSON-ready: NaN/inf -> None, tuples -> lists, recursively."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


# How a split is written for people (tables, pickers).
SPLIT_NAMES = {"held_in": "held-in", "held_out": "held-out", "dev": "dev"}

# The range each summarised quantity lives in, by the end of its name: (lowest, highest), None = unbounded.
RANGES = {"accuracy": (0.0, 1.0), "sound_plans": (0.0, 1.0), "vague_plans": (0.0, 1.0), "gap_ppl": (1.0, None),
          "gap_logppl": (0.0, None), "gold_logppl": (0.0, None)}


def summary(per_seed: dict[int, float], name: str = "") -> dict[str, Any]:
    """Mean and 95% t interval over seeds; the interval cut to the range of ``name``'s quantity (``RANGES``)."""
    seeds = sorted(per_seed)
    out = {**mean_interval([per_seed[s] for s in seeds]), "per_seed": {str(s): per_seed[s] for s in seeds}}
    low, high = next((r for key, r in RANGES.items() if name.endswith(key)), (None, None))
    lo, hi = out["ci95"]
    if low is not None and not math.isnan(lo):
        lo, hi = max(lo, low), max(hi, low)
    if high is not None and not math.isnan(hi):
        lo, hi = min(lo, high), min(hi, high)
    out["ci95"] = [lo, hi]
    return out


def flatten_config(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config as ``{"section.field": value}``."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(flatten_config(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def evaluation_differences(mine: dict[str, Any], theirs: dict[str, Any]) -> dict[str, list[Any]]:
    """``{field: [mine, theirs]}`` for the ``EVALUATION_FIELDS`` in which two flattened configs differ."""
    return {k: [mine.get(k), theirs.get(k)] for k in EVALUATION_FIELDS if mine.get(k) != theirs.get(k)}


def _baseline_refusals(store: Store, experiment_id: str, baseline: str | None) -> dict[str, str]:
    """``variant -> why`` for the variants whose runs evaluate other tasks than the baseline's (``vs_baseline`` is
    left out for them: a paired test needs the same tasks on both sides). Read from the runs' config snapshots, a
    seed both have where there is one; a field only one snapshot has (a run made by an older version) is not
    compared."""
    df = store.query("SELECT r.variant, r.seed, u.config_json FROM experiment_runs r JOIN runs u USING (run_id) "
                     "WHERE r.experiment_id = ? ORDER BY r.seed", [experiment_id])
    configs: dict[str, dict[int, dict[str, Any]]] = defaultdict(dict)
    for row in records(df):
        configs[row["variant"]][int(row["seed"])] = flatten_config(loads(row["config_json"], {}))
    if not baseline or baseline not in configs:
        return {}
    out = {}
    for variant, by_seed in configs.items():
        shared = sorted(set(by_seed) & set(configs[baseline]))
        mine = by_seed[shared[0]] if shared else next(iter(by_seed.values()))
        theirs = configs[baseline][shared[0]] if shared else next(iter(configs[baseline].values()))
        differs = evaluation_differences({k: v for k, v in mine.items() if k in theirs},
                                         {k: v for k, v in theirs.items() if k in mine})
        if variant != baseline and differs:
            out[variant] = "evaluates other tasks than {}: {}".format(
                baseline, "; ".join(f"{k} = {a!r} here, {b!r} there" for k, (a, b) in differs.items()))
    return out


def paired(before: dict[int, float], after: dict[int, float]) -> dict[str, Any] | None:
    """``paired_t(before, after)`` over the seeds both have (None when none)."""
    seeds = sorted(set(before) & set(after))
    if not seeds:
        return None
    return {**paired_t([before[s] for s in seeds], [after[s] for s in seeds]), "seeds": seeds}


def pct_change(before: dict[int, float], after: dict[int, float]) -> dict[str, Any] | None:
    """Per-seed % change of ``after`` vs ``before``, its mean, interval and p (tested against no change)."""
    seeds = sorted(s for s in set(before) & set(after) if before[s])
    if not seeds:
        return None
    pct = {s: 100.0 * (after[s] - before[s]) / before[s] for s in seeds}
    return {**paired_t([0.0] * len(seeds), [pct[s] for s in seeds]), "seeds": seeds,
            "per_seed": {str(s): pct[s] for s in seeds}}


def busy_seconds(intervals: list[tuple[Any, Any]]) -> float:
    """Length of the union of ``(start, end)`` intervals (datetimes or numbers): time during which any was under
    way, each overlap counted once."""
    total, reach = 0.0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += _seconds(end - start)
            reach = end
        elif end > reach:
            total += _seconds(end - reach)
            reach = end
    return total


def _seconds(delta: Any) -> float:
    return delta.total_seconds() if hasattr(delta, "total_seconds") else float(delta)


def _busy(store: Store, experiment_id: str) -> float:
    """The union of the stages' latest spans plus their earlier spans' seconds (see the module docstring)."""
    df = store.query("SELECT s.started_at, s.finished_at FROM experiment_runs r JOIN stages s USING (run_id) "
                     "WHERE r.experiment_id = ? AND s.started_at IS NOT NULL AND s.finished_at IS NOT NULL",
                     [experiment_id])
    earlier = store.query("SELECT coalesce(sum(s.earlier_s), 0) AS s FROM experiment_runs r JOIN stages s "
                          "USING (run_id) WHERE r.experiment_id = ?", [experiment_id])
    return busy_seconds([(a, b) for a, b in df.itertuples(index=False) if b >= a]) + float(earlier["s"].iloc[0])


def _runs(store: Store, experiment_id: str, requested: int) -> list[dict[str, Any]]:
    df = store.query(
        "SELECT r.variant, r.seed, r.run_id, s.iteration, s.stage, s.status, "
        "coalesce(date_diff('microsecond', s.started_at, s.finished_at) / 1e6, 0) + coalesce(s.earlier_s, 0) "
        "AS seconds "
        "FROM experiment_runs r LEFT JOIN stages s USING (run_id) WHERE r.experiment_id = ? "
        "ORDER BY r.seed, r.variant, s.iteration, s.started_at NULLS LAST", [experiment_id])
    runs: dict[str, dict[str, Any]] = {}
    for row in records(df):
        run = runs.setdefault(row["run_id"], {"variant": row["variant"], "seed": int(row["seed"]),
                                              "run_id": row["run_id"], "wall_s": 0.0, "stages": {}})
        if row["stage"] is not None:
            run["stages"][(int(row["iteration"]), row["stage"])] = row["status"]
            run["wall_s"] += row["seconds"] or 0.0
    configs = {r["run_id"]: loads(r["config_json"], {}) for r in records(store.query(
        "SELECT run_id, config_json FROM runs WHERE run_id IN (SELECT run_id FROM experiment_runs "
        "WHERE experiment_id = ?)", [experiment_id]))}
    out = []
    for run in runs.values():
        stages = run.pop("stages")
        initial = configs.get(run["run_id"], {}).get("stages", {}).get("evaluate_initial", True)
        done, t = -1, 0
        while (t == 0 and not initial) or stages.get((t, "evaluate")) in ("done", "skipped"):
            done, t = t, t + 1
        unfinished = [f"{it}:{stage} {status}" for (it, stage), status in stages.items()
                      if status not in ("done", "skipped")]
        run.update({"iterations_done": done, "status": "done" if done >= requested else "incomplete",
                    "wall_s": round(run["wall_s"], 3), "exists": run["run_id"] in configs})
        if run["status"] != "done":
            # Every recorded stage done: the next iteration is begun (its next stage not yet recorded) or not.
            begun = [stage for (it, stage), status in stages.items() if it == done + 1]
            run["at"] = unfinished[0] if unfinished else (
                f"iteration {done + 1}: {', '.join(begun)} done" if begun else f"iteration {done + 1} not started")
        out.append(run)
    return out


Values = dict[str, dict[int, dict[tuple[str, str, str], dict[int, float]]]]


def metric_values(store: Store, experiment_id: str) -> Values:
    """``values[variant][iteration][(split, domain, name)][seed]``: the experiment's stored metrics."""
    values: Values = defaultdict(lambda: defaultdict(lambda: defaultdict(dict)))
    df = store.query(
        "SELECT r.variant, r.seed, m.iteration, m.split, m.domain, m.name, m.value FROM experiment_runs r "
        "JOIN metrics m USING (run_id) WHERE r.experiment_id = ? AND m.split IN (SELECT unnest(?)) "
        "AND m.name IN (SELECT unnest(?))", [experiment_id, list(SPLITS), list(NAMES)])
    for variant, seed, it, split, domain, name, value in df.itertuples(index=False):
        values[variant][int(it)][(split, domain, name)][int(seed)] = float(value)
    return values


def flat_values(values: Values, variant: str, t: int) -> dict[str, dict[int, float]]:
    """One variant's all-domain values at iteration ``t``, keyed ``<split>_<name>`` (``held_out_accuracy``)."""
    return {f"{s}_{n}": v for (s, d, n), v in values.get(variant, {}).get(t, {}).items() if d == "all"}


def experiment_report(store: Store, experiment_id: str) -> dict[str, Any]:
    """The experiment's numbers (see the module docstring)."""
    found = records(store.query("SELECT * FROM experiments WHERE experiment_id = ?", [experiment_id]))
    if not found:
        raise UnknownExperiment(experiment_id, known_experiments(store))
    definition = loads(found[0]["config_json"], {})
    requested = int(definition.get("iterations", 0))
    runs = _runs(store, experiment_id, requested)
    variants = list(dict.fromkeys([*definition.get("variants", {}), *(r["variant"] for r in runs)]))
    runs.sort(key=lambda r: (r["seed"], variants.index(r["variant"])))  # seed-major, in the file's variant order
    baseline = definition.get("baseline", "full" if "full" in variants else None)
    values = metric_values(store, experiment_id)
    refused = _baseline_refusals(store, experiment_id, baseline)

    def flat(variant: str, t: int) -> dict[str, dict[int, float]]:
        return flat_values(values, variant, t)

    report_variants: dict[str, Any] = {}
    for variant in variants:
        its: dict[str, Any] = {}
        for t in sorted(values[variant]):
            cells = values[variant][t]
            entry: dict[str, Any] = {"seeds": sorted({s for per_seed in cells.values() for s in per_seed})}
            for key, per_seed in sorted(flat(variant, t).items()):
                entry[key] = summary(per_seed, key)
            by_domain: dict[str, Any] = defaultdict(lambda: defaultdict(dict))
            for (split, domain, name), per_seed in sorted(cells.items()):
                if domain != "all":
                    by_domain[split][domain][name] = summary(per_seed, name)
            entry["by_domain"] = {s: dict(d) for s, d in by_domain.items()}
            now, start = flat(variant, t), flat(variant, 0)
            if t > 0 and start:
                change = {k: paired(start[k], now[k]) for k in PAIRED if k in now and k in start}
                first = values[variant].get(0, {})
                for split in SPLITS:  # every evaluated split: dev's is the one a gap target can be tuned on
                    key = f"{split}_gap_ppl"
                    if key in now and key in start:
                        change[f"{key}_pct"] = pct_change(start[key], now[key])
                    # Per domain too: the paper's 27% is the maths grounder's PPL; the all-domain mean mixes in QA.
                    by_domain_pct = {c[1]: pct_change(first[c], cells[c]) for c in sorted(cells)
                                     if c[0] == split and c[1] != "all" and c[2] == "gap_ppl" and c in first}
                    change[f"{key}_pct_by_domain"] = {d: v for d, v in by_domain_pct.items() if v is not None} or None
                entry["vs_iteration_0"] = {k: v for k, v in change.items() if v is not None}
            if baseline and variant != baseline and baseline in values and variant not in refused:
                base = flat(baseline, t)
                versus = {k: paired(base[k], now[k]) for k in PAIRED if k in now and k in base}
                entry["vs_baseline"] = {k: v for k, v in versus.items() if v is not None}
            its[str(t)] = entry
        report_variants[variant] = {"iterations": its}
        if variant in refused:
            report_variants[variant]["vs_baseline_refused"] = refused[variant]
    swaps = _swaps(store, experiment_id)
    have = {(r["variant"], r["seed"]) for r in runs}
    seeds = [int(s) for s in definition.get("seeds", [])]
    missing = [{"variant": v, "seed": s} for s in seeds for v in definition.get("variants", {}) if (v, s) not in have]
    per_variant = {v: round(sum(r["wall_s"] for r in runs if r["variant"] == v), 3) for v in variants}
    return clean({
        "experiment": experiment_id, "name": found[0]["name"], "source": found[0]["source"], "baseline": baseline,
        "seeds": seeds, "iterations_requested": requested, "variants": report_variants, "swaps": swaps, "runs": runs,
        "missing": missing, "wall_s": {"total": round(sum(r["wall_s"] for r in runs), 3),
                                       "busy": round(_busy(store, experiment_id), 3), "per_variant": per_variant},
    })


def _swap_iteration(by_cell: dict[tuple[int, int], dict[str, dict[int, float]]], base: int) -> tuple[int, set[int]]:
    """The iteration N a variant's swap tables are read at, and the seeds read: the largest N > base whose three
    trained cells (P{N}G{base}, P{base}G{N}, P{N}G{N}) every seed's tables hold, else the largest any seed's hold,
    with the seeds that hold it. Taking the largest iteration stored put a P{N}G{N} of the one seed whose run went
    further (an experiment extended while another seed's run was unfinished) beside a P0G0 over every seed."""
    def seeds_of(cell: tuple[int, int]) -> set[int]:
        return {s for per_seed in by_cell.get(cell, {}).values() for s in per_seed}

    every = {s for cell in by_cell for s in seeds_of(cell)}
    complete = {n: have for n in sorted({g for _, g in by_cell} | {p for p, _ in by_cell}) if n > base
                for have in [seeds_of((n, base)) & seeds_of((base, n)) & seeds_of((n, n)) & seeds_of((base, base))]
                if have}
    if not complete:  # no table with its three trained cells: the largest iteration stored, every seed
        return max(g for _, g in by_cell), every
    shared = [n for n, seeds in complete.items() if seeds == every]
    after = max(shared) if shared else max(complete)
    return after, complete[after]


def _swaps(store: Store, experiment_id: str) -> dict[str, Any]:
    df = store.query(
        "SELECT r.variant, r.seed, w.planner_after, w.grounder_after, w.split, w.value FROM experiment_runs r "
        "JOIN swaps w USING (run_id) WHERE r.experiment_id = ? AND w.domain = 'all' AND w.name = 'accuracy' "
        "AND w.split IN (SELECT unnest(?))", [experiment_id, list(SPLITS)])
    # cells[variant][(planner_after, grounder_after)][split][seed]
    cells: dict[str, dict[tuple[int, int], dict[str, dict[int, float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(dict)))
    for variant, seed, p, g, split, value in df.itertuples(index=False):
        cells[variant][(int(p), int(g))][split][int(seed)] = float(value)
    out: dict[str, Any] = {}
    for variant, stored in cells.items():
        base = min(g for _, g in stored)
        after, seeds = _swap_iteration(stored, base)
        # Every cell over the same seeds, so that a cell's mean beside another's is a difference of the same runs.
        by_cell = {cell: {sp: {s: v for s, v in per_seed.items() if s in seeds} for sp, per_seed in splits.items()}
                   for cell, splits in stored.items()}

        def name(p: int, g: int) -> str:
            return f"gold/G{g}" if p == -1 else f"P{p}G{g}"

        entry: dict[str, Any] = {"base": base, "after": after, "cells": {}, "gains": {}}
        for (p, g), splits in sorted(by_cell.items()):
            if g not in (base, after) or p not in (-1, base, after):
                continue
            entry["cells"][name(p, g)] = {f"{sp}_accuracy": summary(v, "accuracy")
                                          for sp, v in sorted(splits.items()) if v}
        start = by_cell.get((base, base), {})
        for stage, cell in (("stage1", (after, base)), ("stage2", (base, after)), ("both", (after, after))):
            now = by_cell.get(cell, {})
            gains = {f"{sp}_accuracy": paired(start[sp], now[sp]) for sp in sorted(start) if sp in now}
            entry["gains"][stage] = {k: v for k, v in gains.items() if v is not None}
        entry["cells"] = {k: v for k, v in entry["cells"].items() if v}
        entry["seeds"] = sorted(seeds)
        out[variant] = entry
    return out
