"""One experiment's variants paired over seeds with a variant of *another* experiment in the same store.

Contract: ``compare_report(store, experiment_id, against_id, against_variant="") -> dict`` pairs every variant of
``experiment_id``, iteration by iteration, with ``against_variant`` of ``against_id`` (that experiment's baseline
when empty): ``engine.stats.paired_t`` over the seeds both have, the same way ``engine.report`` pairs a variant with
its own experiment's baseline. It lets a tuning experiment that runs only its new variants be read against a
baseline measured once, instead of re-running the baseline in every file. Shape::

    {"experiment", "name", "against": {"experiment", "name", "variant"},
     "variants": {"<variant>": {"differs": {"<section.field>": [here, there], ...},
                                "iterations": {"<t>": {"held_in_accuracy": P, "held_out_accuracy": P, ...}}}}}

``differs`` lists the config fields in which the variant's runs differ from the other variant's, read from both
runs' stored config snapshots for the first seed they share (run name, seed, iteration count and workdir left
out): what the comparison measures. A pairing is only meaningful on the same evaluation tasks, so
``IncomparableExperiments`` (a ``ValueError`` naming each field and both values) is raised when the two evaluate
different tasks (task files, sources, domains, the evaluation sample, the formulation), for a variant the other
experiment does not have, and when the two share no seed; ``UnknownExperiment`` when either id is not in the store.
``compare_markdown`` renders the same as tables.
"""

from __future__ import annotations

from typing import Any

from engine.dbutil import loads, records
from engine.report import (
    EVALUATION_FIELDS,
    PAIRED,
    SPLIT_NAMES,
    UnknownExperiment,
    clean,
    flat_values,
    flatten_config,
    known_experiments,
    metric_values,
    paired,
)
from engine.report_markdown import format_test, markdown_table
from engine.store import Store

# EVALUATION_FIELDS (engine.report): the fields that decide *which tasks* an evaluation scores.
# Fields every pair of runs differs in by construction, which say nothing about the comparison.
IDENTITY_FIELDS = ("run.name", "run.seed", "run.iterations", "run.workdir")


class IncomparableExperiments(ValueError):
    """The two cannot be paired: different evaluation tasks (the message names each field and both values), no such
    variant, or no shared seed."""


def _experiment(store: Store, experiment_id: str) -> dict[str, Any]:
    found = records(store.query("SELECT * FROM experiments WHERE experiment_id = ?", [experiment_id]))
    if not found:
        raise UnknownExperiment(experiment_id, known_experiments(store))
    definition = loads(found[0]["config_json"], {})
    return {"name": found[0]["name"], "definition": definition}


def _run_configs(store: Store, experiment_id: str) -> dict[tuple[str, int], dict[str, Any]]:
    """``(variant, seed) -> flattened config snapshot`` of the experiment's runs."""
    df = store.query("SELECT r.variant, r.seed, u.config_json FROM experiment_runs r JOIN runs u USING (run_id) "
                     "WHERE r.experiment_id = ?", [experiment_id])
    return {(row["variant"], int(row["seed"])): flatten_config(loads(row["config_json"], {})) for row in records(df)}


def compare_report(store: Store, experiment_id: str, against_id: str, against_variant: str = "") -> dict[str, Any]:
    """Every variant of ``experiment_id`` against one variant of ``against_id`` (see the module docstring)."""
    here, there = _experiment(store, experiment_id), _experiment(store, against_id)
    there_variants = list(there["definition"].get("variants", {}))
    variant = against_variant or there["definition"].get("baseline") or ("full" if "full" in there_variants else "")
    if variant not in there_variants:
        raise IncomparableExperiments(f"experiment {against_id!r} has no variant {variant or '(baseline)'!r}; "
                         f"its variants: {', '.join(there_variants) or 'none'}")
    here_configs, there_configs = _run_configs(store, experiment_id), _run_configs(store, against_id)
    there_seeds = {seed: config for (v, seed), config in there_configs.items() if v == variant}
    values_here, values_there = metric_values(store, experiment_id), metric_values(store, against_id)
    report_variants: dict[str, Any] = {}
    for name in dict.fromkeys([*here["definition"].get("variants", {}), *(v for v, _ in here_configs)]):
        seeds = sorted(seed for (v, seed) in here_configs if v == name and seed in there_seeds)
        if not seeds:
            continue
        mine, theirs = here_configs[(name, seeds[0])], there_seeds[seeds[0]]
        keys = sorted((set(mine) | set(theirs)) - set(IDENTITY_FIELDS))
        differs = {k: [mine.get(k), theirs.get(k)] for k in keys if mine.get(k) != theirs.get(k)}
        wrong = {k: v for k, v in differs.items() if k in EVALUATION_FIELDS}
        if wrong:
            fields = "; ".join(f"{k}: {a!r} here, {b!r} there" for k, (a, b) in wrong.items())
            raise IncomparableExperiments(
                f"{experiment_id} variant {name} and {against_id} variant {variant} evaluate different tasks "
                f"(seed {seeds[0]}): {fields}")
        iterations: dict[str, Any] = {}
        for t in sorted(set(values_here.get(name, {})) & set(values_there.get(variant, {}))):
            now, base = flat_values(values_here, name, t), flat_values(values_there, variant, t)
            tests = {k: paired(base[k], now[k]) for k in PAIRED if k in now and k in base}
            iterations[str(t)] = {k: v for k, v in tests.items() if v is not None}
        report_variants[name] = {"differs": differs, "iterations": iterations}
    if not report_variants:
        raise IncomparableExperiments(f"experiments {experiment_id!r} and {against_id!r} (variant {variant}) share no "
                                      "seed: a paired comparison needs the same seeds on both sides")
    return clean({"experiment": experiment_id, "name": here["name"],
                  "against": {"experiment": against_id, "name": there["name"], "variant": variant},
                  "variants": report_variants})


def compare_markdown(report: dict[str, Any]) -> str:
    """The comparison as one table of paired differences, and each variant's config differences."""
    against = report["against"]
    evaluated = [s for s in ("held_in", "held_out", "dev")
                 if any(f"{s}_accuracy" in it for v in report["variants"].values() for it in v["iterations"].values())]
    # The gap wherever it was paired: held-out (the target) and dev (where a tuning experiment is judged).
    gap_splits = [s for s in ("held_out", "dev")
                  if any(f"{s}_gap_ppl" in it for v in report["variants"].values() for it in v["iterations"].values())]
    lines = [f"# {report['name']} (`{report['experiment']}`) vs {against['name']} (`{against['experiment']}`) "
             f"variant {against['variant']}", "",
             "Differences paired over the seeds both experiments ran (paired t, 95% interval), same iteration; "
             "accuracies in percentage points.", ""]
    rows = [[name, t, *(format_test(it.get(f"{s}_accuracy"), 100) for s in evaluated),
             *(format_test(it.get(f"{s}_gap_ppl"), 1, 3) for s in gap_splits)]
            for name, v in report["variants"].items() for t, it in v["iterations"].items()]
    lines += markdown_table(["variant", "iteration", *(f"{SPLIT_NAMES[s]} accuracy Δ pp" for s in evaluated),
                     *(f"{SPLIT_NAMES[s]} gap PPL Δ" for s in gap_splits)], rows)
    lines += ["## Config differences (this experiment's run, the other's run)", ""]
    rows = [[name, f"`{key}`", f"`{a!r}`", f"`{b!r}`"] for name, v in report["variants"].items()
            for key, (a, b) in v["differs"].items()]
    lines += markdown_table(["variant", "field", "here", "there"], rows)
    return "\n".join(lines)
