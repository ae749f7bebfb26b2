"""``python -m engine step STAGE --run R --iteration T``: run one stage of one iteration.

Refused with exit 2 and ``error: ...`` before anything runs: no store at ``--db`` (none is created), an unknown run, a
stage out of order (``engine.loop.out_of_order``: an earlier stage not done yet, an iteration below 0 or a stage the
iteration does not have), a critic override (``--critic``/``--base-url``/``--model``) the config refuses, given for a
stage other than critique, or for a critique that is done already (it would judge nothing), a model directory the
stage would load that is gone (``engine.preflight.check_stage_agents``: a configured model, named by its field, or a
checkpoint an earlier iteration recorded, named by that iteration and role). A refused stage is not recorded (not as
failed either). A stage that fails prints ``error: iteration T, stage S failed: ...`` (its traceback is in
``status --json``) and the JSON line, and exits 1; Ctrl-C (SIGINT) lets the batch in flight finish, records the
stage "stopped", prints the JSON line and exits 130, as ``run`` does.

``step critique --retry-errors`` judges again the groundings whose verdict is an ``error`` (a critic that was down
for part of a batch, or refused an item; with ``--base-url``/``--model``, on another server): it is refused when the
iteration has none, or when its train_grounder stage has run or is running (the grounder read those verdicts). The
stage is marked stopped, the error verdicts removed, then the stage runs on the groundings without a verdict (those,
and any a stopped or failed critique had not judged yet); every other verdict is kept, so a command killed between
the steps leaves a stage that ``run --run ID`` resumes. Curators' decisions on those groundings (an edited
correction, a review) are keyed by the grounding, not the verdict, and carry over to the new verdict. The stage's
recorded time is then the retry's.
"""

from __future__ import annotations

import argparse

from engine.commands._common import add_quiet_flag

HELP = ("Run one stage (sample, score, pairs, train_planner, ground, critique, train_grounder, evaluate) of one "
        "iteration (exit 0 done or skipped, 1 failed, 2 bad input, 3 store unusable, 130 stopped by Ctrl-C).")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from engine.config import ITERATION_STAGES  # the stage names, without importing the stages (torch)

    parser.add_argument("stage", choices=list(ITERATION_STAGES),
                        help="the stage to run; the stages it reads must be done (the error names the one to run "
                             "first)")
    parser.add_argument("--run", required=True, help="run id (see `python -m engine status`)")
    parser.add_argument("--iteration", type=int, required=True, help="iteration (0 = the starting agents)")
    parser.add_argument("--db", default="runs/studio.duckdb", help="DuckDB store (default: runs/studio.duckdb)")
    parser.add_argument("--critic", choices=("reference", "openai", "hf"), default=None,
                        help="override critic.backend")
    parser.add_argument("--base-url", default=None, help="override critic.base_url (OpenAI-compatible /v1 URL)")
    parser.add_argument("--model", default=None, help="override critic.model")
    parser.add_argument("--retry-errors", action="store_true",
                        help="critique only: judge again the groundings whose verdict is an error (the critic was "
                             "down for part of a batch, or refused an item), before the iteration's grounder "
                             "trains; other verdicts are kept")
    add_quiet_flag(parser)


def run(args: argparse.Namespace) -> int:
    import sys

    from engine.commands._common import (
        BAD_INPUT,
        ctrl_c_stops,
        fail,
        print_json,
        said_stage_failed,
        stopping_note,
        store_missing,
        store_unusable,
    )
    from engine.commands.run import progress_printer
    from engine.config import config_from_dict, config_to_dict
    from engine.errors import ConfigError, DataError
    from engine.loop import out_of_order, run_config, run_stage
    from engine.store import Store, StoreError

    if store_missing(args.db):
        return BAD_INPUT
    try:
        with Store(args.db) as store:
            if store.get_run(args.run) is None:
                print(f"error: {store.unknown_run(args.run, args.db)} (see `python -m engine status --db {args.db}`)",
                      file=sys.stderr)
                return 2
            config = run_config(store, args.run)
            if problem := out_of_order(store, args.run, args.iteration, args.stage, config, args.db):
                print(f"error: {problem}", file=sys.stderr)
                return 2
            overrides = [flag for flag, value in (("--critic", args.critic), ("--base-url", args.base_url),
                                                  ("--model", args.model)) if value is not None]
            if overrides and args.stage != "critique":
                print(f"error: {'/'.join(overrides)} apply to the critique stage only, not {args.stage}",
                      file=sys.stderr)
                return 2
            if args.retry_errors and (problem := _retry_refused(store, args)):
                print(f"error: {problem}", file=sys.stderr)
                return 2
            state = store.stage_status(args.run, args.iteration).get(args.stage) or {}
            unjudged = store.count("groundings", args.run, args.iteration) - store.count("verdicts", args.run,
                                                                                          args.iteration)
            if overrides and state.get("status") == "done" and unjudged <= 0 and not args.retry_errors:
                print(f"error: critique of iteration {args.iteration} is done already (its verdicts came from "
                      f"critic.backend = {config.critic.backend}); {'/'.join(overrides)} would judge nothing. "
                      "They apply to a critique that has not run or did not finish; to compare critics, start a "
                      "run with `--set critic.backend=...` (or an experiment with one variant per critic)",
                      file=sys.stderr)
                return 2
            data = config_to_dict(config)
            for key, value in (("backend", args.critic), ("base_url", args.base_url), ("model", args.model)):
                if value is not None:
                    data["critic"][key] = value
            config = config_from_dict(data, "--critic/--base-url/--model")
            if args.retry_errors:
                _remove_error_verdicts(store, args.run, args.iteration)
            with ctrl_c_stops(stopping_note("step"), again_quits=True) as should_stop:
                try:
                    status = run_stage(store, args.run, args.iteration, args.stage, config=config,
                                       progress=progress_printer(args.quiet), should_stop=should_stop)
                except Exception as exc:
                    if not said_stage_failed(exc, args.db):  # bad input (2) or a bug (its traceback)
                        raise
                    status = "failed"
            print_json({"run_id": args.run, "iteration": args.iteration, "stage": args.stage, "status": status,
                        "state": store.stage_status(args.run, args.iteration).get(args.stage)})
    except (ConfigError, DataError) as exc:  # e.g. --critic openai without --model
        return fail(exc)
    except StoreError as exc:  # held by another process, a newer schema, not a store: say so, no traceback
        return store_unusable(exc)
    return 0 if status in ("done", "skipped") else 130 if status == "stopped" else 1


def _retry_refused(store, args: argparse.Namespace) -> str | None:
    """Why ``--retry-errors`` cannot run here, or None."""
    if args.stage != "critique":
        return f"--retry-errors applies to the critique stage only, not {args.stage}"
    trained = (store.stage_status(args.run, args.iteration).get("train_grounder") or {}).get("status")
    if trained in ("running", "done"):
        return (f"train_grounder of iteration {args.iteration} is {trained}: the grounder was trained on these "
                "verdicts, and judging them again now would leave the store saying otherwise. Start a new run to "
                "judge with another critic")
    errors = store.count("verdicts", args.run, args.iteration, status="error")
    if not errors:
        return f"iteration {args.iteration} has no error verdicts to judge again"
    return None


def _remove_error_verdicts(store, run_id: str, iteration: int) -> None:
    """Mark the stage stopped, then remove its error verdicts: a command killed in between leaves a stage that a
    resume runs again, never a "done" one with groundings unjudged. The stop keeps the first judging's finish, so its
    seconds join the stage's time when it runs again (``engine.ledger``: ``earlier_s``). A stage still marked
    running (its process was killed) is left so: a resume runs it again anyway, and a stop stamped now would count the
    hours since the kill as judging."""
    errors = store.count("verdicts", run_id, iteration, status="error")
    if (store.stage_status(run_id, iteration).get("critique") or {}).get("status") != "running":
        store.set_stage(run_id, iteration, "critique", "stopped",
                        error=f"{errors} error verdict(s) removed to be judged again (step critique --retry-errors)")
    store.delete("verdicts", run_id, iteration, status="error")
