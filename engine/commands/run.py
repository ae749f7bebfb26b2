"""``python -m engine run``: create (or resume) a run from a config and run its pending stages.

Bad input exits 2 with ``error: ...`` on stderr before any stage runs: a config error, a task file error, a model
that fails ``engine.preflight`` (checked by ``create_run``/``run_loop``), an unknown ``--run`` (or no store at
``--db``), ``--iterations`` below 0, or ``--run`` with ``--config``/``--set`` (a run keeps the config it was created
with). A refused run leaves nothing behind: a store file (and directories) this command created is removed.

``--iterations N`` (1 or more) is the run's target, recorded as its ``run.iterations`` (the store's config snapshot
and the run directory's config.toml): a new run is created with it, and ``--run ID --iterations N`` re-targets an
existing run (extends or limits it), so a later ``--run ID`` without it goes to the same N. ``--iterations 0`` runs
iteration 0 only and records nothing.

The last stdout line is one JSON object ``{"run_id", "status", "db", "directory", "iterations"}`` (the run's folder;
its iterations as ``status --json`` lists them), also when a stage failed (its error on stderr, its traceback in the
store). Exit status: 0 done, 1 a stage failed, 2 bad input, 3 the store cannot
be used (held by another process, a newer schema, ...), 130 stopped by Ctrl-C (SIGINT; the batch in flight is
finished, the stage recorded ``stopped``, and ``--run ID`` resumes it; a second Ctrl-C quits at once, no summary).
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from engine.commands._common import add_quiet_flag

DEFAULT_CONFIG = "examples/demo.toml"
# Exit status by the run's final status (anything else, "failed": 1). 130 = 128 + SIGINT, the shell's convention
# for a command ended by Ctrl-C: a script or CI wrapper can tell a stopped (resumable) run from a finished one.
EXIT_STATUS = {"done": 0, "stopped": 130}
HELP = ("Run the MOAT loop: every pending stage of iterations 0..N, resuming an interrupted run (exit 0 done, "
        "1 failed, 2 bad input, 3 store unusable, 130 stopped by Ctrl-C).")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=None, help="run config (TOML or YAML; default: examples/demo.toml)")
    parser.add_argument("--db", default="runs/studio.duckdb", help="DuckDB store (default: runs/studio.duckdb)")
    parser.add_argument("--run", default=None, help="resume this run id instead of creating a new run")
    parser.add_argument("--iterations", type=int, default=None,
                        help="run iterations 0..N and record N as the run's run.iterations, so a resume goes as far "
                             "(default: run.iterations; 0: iteration 0 only, not recorded)")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                        help="override a config field, e.g. --set sample.k=8 --set data.train_limit=32 (every "
                             "field with its help: python -m engine config)")
    add_quiet_flag(parser)


def progress_printer(quiet: bool):
    """A progress sink drawing one tqdm bar per stage (stderr), or, ``quiet``, nothing: no library's bars either."""
    if quiet:
        from engine.commands._common import quiet_libraries

        quiet_libraries()
        return None
    from tqdm import tqdm

    bars: dict[tuple[int, str], tqdm] = {}

    def show(event: dict) -> None:
        key = (event["iteration"], event["stage"])
        if key not in bars:
            for bar in bars.values():
                bar.close()
            bars.clear()
            bars[key] = tqdm(total=event["total"] or None, desc=f"iter {key[0]} {key[1]}", unit="batch", leave=True)
        bar = bars[key]
        if event["total"]:  # the "started" event has no total yet
            bar.total = event["total"]
        bar.n = event["done"]
        bar.set_postfix_str(event.get("message", ""), refresh=False)
        bar.refresh()

    return show


def _first_missing(db: Path) -> Path | None:
    """The outermost of ``db`` and its parent directories that does not exist yet (None: the store exists)."""
    if db.exists():
        return None
    missing = db
    while not missing.parent.exists():
        missing = missing.parent
    return missing


def _remove_new(made: Path | None, db: Path) -> None:
    """Remove the store file (and its directories) this command created before it refused the run."""
    if made is None:
        return
    for leftover in (db, db.with_name(db.name + ".wal")):
        leftover.unlink(missing_ok=True)
    if made != db:
        shutil.rmtree(made, ignore_errors=True)


def run(args: argparse.Namespace) -> int:
    import shlex
    import sys

    from engine.commands._common import (
        ctrl_c_stops,
        fail,
        no_store,
        print_json,
        said_stage_failed,
        stopping_note,
        store_unusable,
    )
    from engine.config import load_config, locate_error
    from engine.errors import ConfigError, DataError
    from engine.loop import create_run, run_loop
    from engine.store import Store, StoreError

    db = Path(args.db)
    if args.iterations is not None and args.iterations < 0:
        print(f"error: --iterations must be 0 or more, not {args.iterations}", file=sys.stderr)
        return 2
    if args.run and not db.exists():  # opening it would create an empty store
        print(f"error: {no_store(args.db)}, so no run {args.run!r}", file=sys.stderr)
        return 2
    # Ctrl-C: finish the batch in flight, record "stopped", print the summary, exit 130
    with ctrl_c_stops(stopping_note("run"), again_quits=True) as should_stop:
        made = _first_missing(db)  # removed again if the run is refused: a refusal leaves nothing behind
        target = [f"run.iterations={args.iterations}"] if args.iterations else []  # a new run records N
        config = None
        try:
            config = None if args.run else load_config(args.config or DEFAULT_CONFIG, [*args.set, *target])
            with Store(args.db) as store:
                if args.run:
                    if store.get_run(args.run) is None:
                        print(f"error: {store.unknown_run(args.run, args.db)}", file=sys.stderr)
                        return 2
                    if args.set or args.config:  # silently running the stored config would mislead
                        given = " ".join(["--config"] * bool(args.config) + ["--set"] * bool(args.set))
                        print(f"error: {given} cannot change run {args.run!r}: a run keeps the config it was created "
                              f"with (its run directory's config.toml). Resume it without them, or create a new run: "
                              f"python -m engine run --config FILE --set ...", file=sys.stderr)
                        return 2
                    run_id = args.run
                else:
                    run_id = create_run(store, config)
                try:
                    status = run_loop(store, run_id, iterations=args.iterations,
                                      progress=progress_printer(args.quiet), should_stop=should_stop,
                                      record_iterations=True)
                except KeyboardInterrupt:  # a second Ctrl-C: no summary follows, so name the run and how to resume
                    print(f"\nrun {run_id} quit at once; `python -m engine run --run {run_id} --db "
                          f"{shlex.quote(args.db)}` resumes it", file=sys.stderr)
                    raise
                except Exception as exc:
                    # A stage failed: the store holds it, with its traceback, and keeps the run (a store this
                    # command made is not removed). Say so, then summarise. Else bad input (2) or a bug (traceback).
                    resume = (f"once the cause is fixed, `python -m engine run --run {run_id} --db "
                              f"{shlex.quote(args.db)}` resumes it")
                    if not said_stage_failed(exc, args.db, resume):
                        raise
                    status = "failed"
                summary = store.status_summary()["runs"].get(run_id, {})
                print_json({"run_id": run_id, "status": status, "db": args.db, "directory": summary.get("directory"),
                            "iterations": summary.get("iterations", [])})
        except (ConfigError, DataError) as exc:
            _remove_new(made, db)
            if isinstance(exc, ConfigError) and config is not None:  # a field found bad once used: name its line
                exc = locate_error(exc, args.config or DEFAULT_CONFIG, [*args.set, *target])
            return fail(exc)
        except StoreError as exc:  # held by another process, a newer schema, not a store: say so, no traceback
            return store_unusable(exc)
    return EXIT_STATUS.get(status, 1)
