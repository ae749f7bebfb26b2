"""``python -m engine experiment --config FILE``: run an experiment's variants x seeds as ordinary runs, resumably.

Contract: the experiment file (``engine.experiment``) is parsed, every chosen variant's config is built for every
chosen seed, and each distinct set of models and task file passes ``engine.preflight`` -- all before the store is
opened, so bad input exits 2 with ``error: ...`` on stderr and writes nothing. Then the runs go seed-major
(``engine.runner``): in this process, directly in the store (``--jobs 1``), or N at once in worker processes on
their own DuckDB files, merged into the store as each finishes (``--jobs N``; ``engine.jobs``). Re-running the
same command resumes: finished runs are skipped, interrupted ones continue, missing ones are created, and a larger
``--iterations`` extends them. Ctrl-C stops after the batch in flight (resumable: the same command continues). A tqdm
bar on stderr counts (run, stage) units (``--quiet``: none); a per-run summary with wall times goes to stderr; the
last stdout line is one JSON object ``{"experiment": id, "name", "status", "db", "runs": [...], "wall_s"}``. Exit
status: 0 done, 1 a run failed, 2 bad input, 3 the store cannot be used (held by another process, ...), 130 stopped
by Ctrl-C (SIGINT; 128 + 2, the shell's convention, as ``engine run``), so a script can tell it from a finished one.

``--dry-run`` stops after the checks: it says what the same command would do -- each run created, resumed or
skipped, the stages and swap tables left, and an estimate of the stage time from the medians the store and the
job files a ``--jobs N`` command left have recorded (``engine.experiment_plan``) -- on stderr as a table and as the
last stdout line (``{"experiment": id, "dry_run": true, ..., "new": is it new to the store, "other_definitions":
[older ids of its name]}``; the real command's note on a new definition of a recorded name is printed as well), and
writes nothing: the store is opened read-only, and one that does not exist is not created.
"""

from __future__ import annotations

import argparse

from engine.commands._common import add_quiet_flag

# Exit status by the experiment's status: a failed run outranks a stop; 130 = 128 + SIGINT (as ``engine run``).
EXIT_STATUS = {"done": 0, "failed": 1, "stopped": 130}
HELP = ("Run an experiment file: variants x seeds as ordinary runs grouped under one id, resumable (--jobs N; exit 0 "
        "done, 1 a run failed, 130 stopped by Ctrl-C).")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="experiment file (see examples/experiments/)")
    parser.add_argument("--db", default="runs/studio.duckdb", help="DuckDB store (default: runs/studio.duckdb)")
    parser.add_argument("--variants", default=None, help="comma-separated variants to run (default: all)")
    parser.add_argument("--seeds", default=None, help="comma-separated seeds to run (default: the file's)")
    parser.add_argument("--iterations", type=int, default=None, help="iterations per run (default: the file's)")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                        help="override a config field in every variant, after the file's set (e.g. --set "
                             "run.workdir=/tmp/runs --set data.train_limit=8): part of the experiment's definition, "
                             "so the same line resumes it and another --set makes another experiment")
    parser.add_argument("--jobs", type=int, default=1,
                        help="runs at once, each in its own process and DuckDB file (one per GPU); default 1: "
                             "in this process, directly in the store")
    add_quiet_flag(parser)
    parser.add_argument("--dry-run", action="store_true",
                        help="say what would run (runs to create, resume or skip; stages left; estimated stage time "
                             "from the medians of the stage times recorded in the store and its job files) and "
                             "write nothing")


def _items(text: str, flag: str) -> list[str]:
    """The comma-separated items of ``text``, stripped; an empty one among others (``11,,12``: a slip, which ran
    the rest unsaid) is an error. A flag given empty has no items."""
    from engine.errors import ConfigError

    items = [item.strip() for item in text.split(",")]
    if items == [""]:
        return []
    if "" in items:
        raise ConfigError(flag, f"an empty item in {text!r} (item {items.index('') + 1}): expected comma-separated "
                                "values", "command line")
    return items


def _chosen(args: argparse.Namespace, exp) -> tuple[list[str], list[int], int]:
    from engine.config_values import suggest
    from engine.errors import ConfigError
    from engine.experiment import parse_seeds

    variants = list(exp.variants)
    if args.variants is not None:
        variants = _items(args.variants, "--variants")
        if not variants:
            raise ConfigError("--variants", "expected at least one variant name", "command line")
        for v in variants:
            if v not in exp.variants:  # the file's variants are what it is checked against: named as the source
                raise ConfigError("--variants", f"no variant {v!r}{suggest(v, exp.variants)} (variants: "
                                                f"{', '.join(exp.variants)})", "command line")
    seeds = exp.seeds
    if args.seeds is not None:
        items = _items(args.seeds, "--seeds")  # a ConfigError, which is a ValueError: outside the try
        try:
            seeds = [int(s) for s in items]
        except ValueError:
            raise ConfigError("--seeds", f"expected comma-separated integers, got {args.seeds!r}",
                              "command line") from None
        seeds = parse_seeds(seeds, "--seeds", "command line")
    iterations = exp.iterations if args.iterations is None else args.iterations
    if iterations < 1:
        raise ConfigError("--iterations", f"must be >= 1, got {iterations}", "command line")
    if args.jobs < 1:
        raise ConfigError("--jobs", f"must be >= 1, got {args.jobs}", "command line")
    return variants, seeds, iterations


def _preflight(exp, variants: list[str], seeds: list[int], iterations: int) -> None:
    """Every run's config builds, and each distinct model set and task file loads (before anything is written)."""
    import json

    from engine.config_checks import check_launch_files
    from engine.errors import ConfigError
    from engine.experiment import validate_runs
    from engine.preflight import preflight
    from engine.runtime import check_eval_splits, load_run_tasks

    validate_runs(exp, seeds, iterations)
    seen: set[str] = set()
    for variant in variants:
        config = exp.run_config(variant, seeds[0], iterations)
        try:
            check_launch_files(config)
        except ConfigError as exc:
            raise ConfigError(f"variants.{variant}", f"{exc.field}: {exc.message}", str(exp.source)) from None
        key = json.dumps([config.planner.__dict__, config.grounder.__dict__, config.critic.__dict__,
                          config.data.__dict__, config.sft.original_data, config.evaluate.splits], sort_keys=True,
                         default=str)
        if key in seen:
            continue
        seen.add(key)
        try:
            tasks = load_run_tasks(config)
            check_eval_splits(config, tasks)
            preflight(config, tasks, probe_critic=True)
        except ConfigError as exc:
            raise ConfigError(f"variants.{variant}", f"{exc.field}: {exc.message}", str(exp.source)) from None


def run(args: argparse.Namespace) -> int:
    import sys
    import time

    from engine.commands._common import ctrl_c_stops, fail, print_json, store_unusable
    from engine.errors import ConfigError, DataError, StoreError
    from engine.experiment import load_experiment

    try:
        exp = load_experiment(args.config, args.set)
        variants, seeds, iterations = _chosen(args, exp)
        _preflight(exp, variants, seeds, iterations)
    except (ConfigError, DataError) as exc:
        return fail(exc)
    if args.dry_run:
        return _dry_run(args, exp, variants, seeds, iterations)

    from tqdm import tqdm

    from engine.commands._common import quiet_libraries
    from engine.jobs import absorb_job_files, run_parallel
    from engine.runner import plan_runs, register, run_inprocess, swap_finished
    from engine.store import Store

    quiet_libraries()  # the trainers' tokenizing bars would break up the experiment's own bar
    started = time.perf_counter()
    exp_id = exp.experiment_id
    # Ctrl-C: finish the batch in flight, record "stopped", exit 130
    with ctrl_c_stops("\nstopping after the batch in flight (the same command resumes) ...") as should_stop:
        try:
            with Store(args.db) as store:
                new, others = register(store, exp, seeds, iterations)
                if new and others:
                    print(_new_definition_note(exp, others), file=sys.stderr)
                jobs = "in this process" if args.jobs == 1 else f"{args.jobs} jobs"
                print(f"experiment {exp_id}: {len(variants)} variant(s) x {len(seeds)} seed(s), {iterations} "
                      f"iteration(s), {jobs}; db {args.db}", file=sys.stderr)
                if args.jobs == 1:
                    absorb_job_files(store, exp_id)
                plans = plan_runs(store, exp, variants, seeds, iterations, use_job_files=args.jobs > 1)
                units = sum(p.units for p in plans)
                # Nothing left: no bar (an empty one drew "0stage [00:00, ?stage/s]", twice, above the summary).
                bar = tqdm(total=units, unit="stage", disable=args.quiet or units == 0, file=sys.stderr,
                           dynamic_ncols=True)
                hooks = {"on_start": bar.set_description,
                         "on_unit": lambda name: (bar.set_description(name, refresh=False), bar.update(1)),
                         "should_stop": should_stop}
                try:
                    if args.jobs == 1:
                        results = run_inprocess(store, exp, plans, iterations, **hooks)
                    else:
                        results = run_parallel(store, exp, plans, iterations, args.jobs, **hooks)
                    swaps = swap_finished(store, exp, seeds, iterations, on_start=bar.set_description,
                                          should_stop=hooks["should_stop"])
                finally:
                    bar.close()
        except ConfigError as exc:  # the model or task files changed under a recorded experiment
            return fail(exc)
        except StoreError as exc:  # held by another process, a newer schema, not a store: say so, no traceback
            return store_unusable(exc)
    wall = time.perf_counter() - started
    statuses = [r.status for r in results]
    status = "failed" if "failed" in statuses else "stopped" if should_stop() or "stopped" in statuses else "done"
    width = max(len(r.name) for r in results)
    id_width = max(len(r.run_id or "-") for r in results)  # run ids differ in length: keep the statuses in a column
    for r in results:
        print(f"  {r.name:<{width}}  {r.run_id or '-':<{id_width}}  {r.status}  {r.wall_s:.1f} s", file=sys.stderr)
    print(f"experiment {exp_id}: {status}; {statuses.count('done')} run(s) finished now, "
          f"{statuses.count('already done')} already done; {wall:.1f} s", file=sys.stderr)
    print_json({"experiment": exp_id, "name": exp.name, "status": status, "db": str(args.db),
                "runs": [r.to_dict() for r in results], "swaps": swaps, "wall_s": round(wall, 3)})
    return EXIT_STATUS.get(status, 1)


def _new_definition_note(exp, others: list[str]) -> str:
    """What the command says of an experiment new to the store whose name other (older) definitions share."""
    return (f"note: {exp.source} differs from the definition of experiment(s) {', '.join(others)}: this is a new "
            f"experiment {exp.experiment_id} (the runs of unchanged variants are reused, the others start afresh)")


def _dry_run(args: argparse.Namespace, exp, variants: list[str], seeds: list[int], iterations: int) -> int:
    """``--dry-run`` (see the module docstring): exit 0, 2 for inputs changed under a recorded experiment, 3 for a
    store that cannot be opened (held by a running experiment, say)."""
    import sys
    from pathlib import Path

    from engine.commands._common import fail, print_json, store_unusable
    from engine.errors import ConfigError, StoreError
    from engine.experiment_plan import describe
    from engine.report_markdown import duration_text
    from engine.runner import other_definitions, plan_runs, recorded_experiment
    from engine.store import Store

    new, others = True, []  # no store yet: the real command records a new experiment, and no other of its name
    try:
        if Path(args.db).exists():
            with Store(args.db, read_only=True) as store:
                # The real command would refuse changed model or task files, and say what ``register`` returns.
                new = recorded_experiment(store, exp) is None
                others = other_definitions(store, exp)
                # Job files hold a --jobs run's newest rows; the real command reads (or absorbs) them first.
                plans = plan_runs(store, exp, variants, seeds, iterations, use_job_files=True, read_only=True)
                summary = describe(store, exp, plans, seeds, iterations, absorbs=args.jobs == 1)
        else:
            summary = describe(None, exp, plan_runs(None, exp, variants, seeds, iterations), seeds, iterations)
    except ConfigError as exc:
        return fail(exc)
    except StoreError as exc:
        return store_unusable(exc)
    if new and others:
        print(_new_definition_note(exp, others), file=sys.stderr)
    recorded = "a new experiment" if new else "recorded in this store"
    print(f"experiment {exp.experiment_id} (dry run: nothing written; {recorded}): {len(variants)} variant(s) x "
          f"{len(seeds)} seed(s), {iterations} iteration(s); db {args.db}", file=sys.stderr)
    width = max(len(r["name"]) for r in summary["runs"])
    for r in summary["runs"]:
        print(f"  {r['name']:<{width}}  {r['action']:<6}  {r['units']:>3} stage(s) left  {r['run_id'] or '-'}",
              file=sys.stderr)
    actions = [r["action"] for r in summary["runs"]]
    if summary["estimate_s"] is None:
        time_text = f"no estimate ({summary['estimate_from']})"
    else:
        unestimated = summary["unestimated"]
        left_out = f"; {unestimated} stage(s) with no recorded time left out" if unestimated else ""
        time_text = (f"about {duration_text(summary['estimate_s'])} of stage time, summed over runs (medians of "
                     f"{summary['estimate_from']}{left_out})")
    print(f"{len(actions)} run(s): {actions.count('create')} to create, {actions.count('resume')} to resume, "
          f"{actions.count('skip')} finished; {summary['units']} stage(s) left, {summary['swaps']} swap table(s); "
          f"{time_text}", file=sys.stderr)
    print_json({**summary, "db": str(args.db), "new": new, "other_definitions": others})
    return 0
