"""Studio test helpers shared by the studio test modules (one copy instead of one per module):

* ``free_port`` and ``serve_studio``: the studio app on a store, served in this process on a free port of 127.0.0.1
  (test_studio_browser.py, its served experiment too, and test_studio_picker.py).
* ``served_studio``: a store through critique of iteration 1 built by a tiny loop (``build_studio_store``) and served,
  closed again afterwards (the ``served`` fixtures of test_studio_browser.py and test_studio_picker.py and
  test_studio_keyboard.py's ``served_big``).
* the ``store`` and ``run_id`` fixtures (``studio_store``, ``studio_run_id``): a writable copy of the module's
  ``studio_db`` for each test (test_studio_handlers.py, test_studio_spaces_ux.py); a module imports them and defines
  ``studio_db``.
* ``blocking_job``: a studio job that reports one progress row and runs until stopped (the job worker's tests).
* ``write_iterative_task`` and ``add_iterative_iteration``: plans, scores and pairs as an iterative run
  (``sample.formulation = iterative``) writes them, several steps per task (test_studio_handlers.py,
  test_studio_pairs_ux.py).
"""

from __future__ import annotations

import json
import shutil
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def free_port() -> int:
    """A TCP port of 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_studio(store) -> tuple[str, object]:
    """``(url, demo)``: the studio app built on ``store`` (examples/demo.toml) and served in this process, not
    blocking; the caller closes ``demo``."""
    from studio.app import HEAD, build_app
    from studio.auth import serve

    demo = build_app(store, "examples/demo.toml")
    port = free_port()
    serve(demo, port=port, prevent_thread_lock=True, quiet=True, head=HEAD)
    return f"http://127.0.0.1:{port}/", demo


@contextmanager
def served_studio(folder: Path, agents: Path, demo_tasks, extra: tuple[str, ...] = ()) -> Iterator[tuple]:
    """``(url, store, run_id, demo)``: ``build_studio_store`` (test_studio_handlers.py; ``extra`` are its more
    ``--set`` overrides) writes ``folder/studio.duckdb``, which is opened and served by ``serve_studio``. On leaving,
    any running job is stopped (waiting up to 10 s), then the app and the store are closed."""
    from test_studio_handlers import build_studio_store

    from engine.store import Store

    path = folder / "studio.duckdb"
    run_id = build_studio_store(path, agents, demo_tasks, extra)
    store = Store(path)
    url, demo = serve_studio(store)
    try:
        yield url, store, run_id, demo
    finally:
        demo.moat_jobs.stop()
        demo.moat_jobs.wait(10)
        demo.close()
        store.close()


@pytest.fixture(name="store")
def studio_store(studio_db, tmp_path):
    """``store``: a Store on this test's own copy of ``studio_db`` (``(path, run_id)``, a fixture of the importing
    module built once), so a test may write to it freely. Named apart from the fixture so that a test's ``store``
    argument does not shadow an import."""
    from engine.store import Store

    copy = tmp_path / "studio.duckdb"
    shutil.copy(studio_db[0], copy)
    with Store(copy) as s:
        yield s


@pytest.fixture(name="run_id")
def studio_run_id(studio_db) -> str:
    """``run_id``: the id of ``studio_db``'s run."""
    return studio_db[1]


def blocking_job(started: threading.Event, done: int, total: int, eta_s: float, poll_s: float):
    """A job for ``JobWorker.submit``: reports one progress row (iteration 1's sample, ``done``/``total``, ``eta_s``),
    sets ``started``, then polls ``should_stop`` every ``poll_s`` seconds and returns "stopped"."""
    def job(progress, should_stop):
        progress({"iteration": 1, "stage": "sample", "done": done, "total": total, "eta_s": eta_s, "message": "batch"})
        started.set()
        while not should_stop():
            threading.Event().wait(poll_s)
        return "stopped"
    return job


def write_iterative_task(store, run_id: str, iteration: int, task_id: str,
                         steps: dict[int, list[tuple[str, float | None]]]) -> None:
    """One task's plans and scores as an iterative run writes them: K candidates per step, each step numbering its own
    from k=0; ``steps`` maps a step to its candidates' ``(text, log-PPL)`` (None: not scored)."""
    key = {"run_id": run_id, "iteration": iteration, "task_id": task_id}
    store.write("plans", [{**key, "step": step, "k": k, "prompt": "p", "text": text,
                           "subgoals_json": json.dumps([text]), "well_formed": True}
                          for step, plans in steps.items() for k, (text, _) in enumerate(plans)])
    store.write("scores", [{**key, "step": step, "k": k, "logppl": logppl, "ppl": 2.718 ** logppl, "n_tokens": 4}
                           for step, plans in steps.items() for k, (_, logppl) in enumerate(plans)
                           if logppl is not None])


def add_iterative_iteration(store) -> int:
    """The iteration after the hand-made world's (tests/_store_world.py, whose pairs are onetime: step 0) as an
    iterative run writes it: m1 and m2 in two steps of two candidates each ("m1 second step, plan b", ...), one pair
    per task-step, step 2's margin (1.2) above step 1's (0.4). Returns that iteration."""
    from tests._store_world import IT, RUN

    iteration = IT + 1
    for task_id in ("m1", "m2"):
        write_iterative_task(store, RUN, iteration, task_id, {
            1: [(f"{task_id} first step, plan a", 0.5), (f"{task_id} first step, plan b", 0.9)],
            2: [(f"{task_id} second step, plan a", 1.4), (f"{task_id} second step, plan b", 0.2)]})
    store.write("pairs", [{"run_id": RUN, "iteration": iteration, "task_id": task_id, "step": step, "pair_idx": 0,
                           "chosen_k": c, "rejected_k": r, "chosen_logppl": lc, "rejected_logppl": lr,
                           "margin": lr - lc, "rule": "best_worst"}
                          for task_id in ("m1", "m2") for step, c, r, lc, lr in ((1, 0, 1, 0.5, 0.9),
                                                                                  (2, 1, 0, 0.2, 1.4))])
    return iteration
