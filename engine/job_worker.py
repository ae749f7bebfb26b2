"""One job of a parallel experiment (``engine.jobs``): ``python -m engine.job_worker --db JOB --run RUN
--iterations N`` runs ``run_loop`` on the job's own store file.

Protocol: stdout carries one JSON line per finished stage (``{"event": "stage", "iteration", "stage", "status"}``)
and a last ``{"event": "end", "status"}`` (``done`` or ``stopped``); an exception ends it with a traceback on stderr
and exit status 1. SIGINT/SIGTERM set the stop flag (the stage in flight stops after its batch, resumable), and so
does the parent's death. ``$MOAT_JOB_THREADS`` sets torch's thread count. Signal handlers are installed before the
heavy imports, so a stop that arrives while torch loads is a clean stop too.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys

THREADS_ENV = "MOAT_JOB_THREADS"


def main(argv: list[str] | None = None) -> int:
    stop = {"flag": False}

    def request_stop(*_: object) -> None:
        stop["flag"] = True

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    parent = os.getppid()
    parser = argparse.ArgumentParser(prog="python -m engine.job_worker", description=__doc__.split("\n")[0])
    parser.add_argument("--db", required=True, help="the job's own store file")
    parser.add_argument("--run", required=True, help="the run id (the same in the job file and the main store)")
    parser.add_argument("--iterations", type=int, required=True, help="run iterations 0..N")
    args = parser.parse_args(argv)
    if os.environ.get(THREADS_ENV):
        import torch

        torch.set_num_threads(int(os.environ[THREADS_ENV]))
    from engine.loop import extend_iterations, run_loop
    from engine.store import Store

    def emit(event: dict) -> None:
        try:
            print(json.dumps(event), flush=True)
        except BrokenPipeError:  # the parent was killed: nobody reads; should_stop ends the run, resumable
            stop["flag"] = True
            try:  # stdout's pipe is gone: point it at nothing, so Python's exit flush raises nothing either
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            except OSError:
                pass

    def should_stop() -> bool:
        return stop["flag"] or os.getppid() != parent  # a killed parent: stop, so a re-run can resume the file

    with Store(args.db) as store:
        if args.iterations >= 1:  # a job file seeded before the experiment was extended: the merged runs row says N
            extend_iterations(store, args.run, args.iterations)
        status = "stopped" if should_stop() else run_loop(
            store, args.run, iterations=args.iterations, should_stop=should_stop,
            on_stage=lambda t, s, st: emit({"event": "stage", "iteration": t, "stage": s, "status": st}))
    emit({"event": "end", "status": status})
    return 0


if __name__ == "__main__":
    sys.exit(main())
