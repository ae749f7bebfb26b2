"""The job worker: runs engine.loop work on a background thread that outlives any browser tab.

Contract:

* One ``JobWorker`` per ``Store`` (created once by ``studio.app.build_app`` and shared by every session: the one
  sanctioned piece of shared state, like LLaMA-Factory's runner but per store, never a module global).
* At most one job at a time: ``submit``/``start_loop`` return a refusal message while a job runs (``None`` when the
  job started). A read-only worker refuses every job. ``start_loop(..., max_iteration=N)`` refuses a job that would
  run a stage of an iteration past ``N`` (Spaces: ``run.iterations`` at most 1), checked when it is asked for and
  again when the job starts computing (the store may have moved on in between); ``loop_reach`` says how far a job
  would go and ``loop_stages`` which stages it would run, in order (the Run tab's announcement names them).
* A loop job that runs a stage of an iteration past the run's ``run.iterations`` (*Next stage* or *Next iteration*
  on a complete run; *Rest of iteration* has nothing to finish there and runs nothing) first raises
  ``run.iterations`` to that iteration, as ``python -m engine run --iterations N`` does
  (``engine.loop.run_loop(record_iterations=True)``: the store's snapshot and the run's config.toml, once the
  preflight passed): the run's record says how far it goes, and a later resume (the CLI's ``run`` without
  ``--iterations``, *Rest of iteration*) finishes that iteration. It never lowers it.
* ``stop()`` sets a ``threading.Event`` the engine polls as ``should_stop`` (between batches / optimizer steps);
  the stage is then recorded ``stopped`` in the store and resumes later from what is stored. Its line names the job
  (``Stop requested: the job `kind` on `run` ...``). A stop from a page other than the starter's is recorded
  (``stopped_by``: its curator name, else "another page") and shown in the job box. With ``own_jobs_only`` (Spaces)
  only the starting page (or another page of its browser: ``owners.same_owner``) may stop a job, and another page's
  refusal says to wait rather than to stop it.
* ``owners``: which browser created which run (``studio.run_owners.RunOwners``: *Start a new run* records it,
  ``studio.run_jobs.start_first_iteration``), kept here because the worker is the store's one piece of state every
  session shares; on a Space a page curates only the runs its browser created (``studio.curation_rights``), by the
  rule that lets it stop only the job its browser started.
* A refusal says who holds the worker as far as the asking page may know (``started_by``): "started from this page"
  when the same browser session (``session``, Gradio's ``request.session_hash``), or a page of the same browser,
  started it, else the starter's
  curator name when one was given (the job box shows it too), else "started by another page, no name given"; a job
  no page started (the first-visit demo) or one whose starter recorded no session says "started with no name given".
  A session id is never shown.
* Progress events from the engine are kept in memory (the last ``max_events``) next to the job's state;
  ``snapshot()`` returns a plain dict any session (or a reloaded page) renders, so a reload re-attaches. The
  durable record is the store's ``stages`` and ``train_logs`` tables.
* A job that ends on bad input (``ConfigError``: a model directory or recorded checkpoint that has gone, refused by
  ``engine.loop.run_stage`` before the stage is marked running) keeps the message alone as its error; any other
  exception keeps the message and a short traceback (the stage is recorded ``failed`` in the store).
* ``swap_job``: the Metrics tab's *Compute the swap table* (``engine.swap.swap_table`` on the worker: the CLI's
  ``swap`` cannot open the store while the studio holds it); ``swap_unavailable`` says why it cannot run yet.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from typing import Any

from engine.errors import ConfigError
from engine.loop import pending, run_config, run_loop
from engine.store import Store
from studio.run_owners import RunOwners

JobFn = Callable[[Callable[[dict[str, Any]], None], Callable[[], bool]], str]
LOOP_KINDS = ("next_stage", "rest_of_iteration", "next_iteration")
# How a press refused while a job runs begins; "(kind on run, started ...)" follows (the Run tab's
# ``studio.run_jobs.settled_message`` reads it back to settle the line once that job has ended).
BUSY_HEAD = "Refused: a job is already running on this store"


class JobWorker:
    """One background job at a time on one store; see the module docstring."""

    def __init__(self, store: Store, read_only: bool = False, max_events: int = 200, own_jobs_only: bool = False):
        self.store = store
        self.read_only = read_only
        # Spaces: a page may stop only the job it started (any visitor stopped any run, the first-visit demo's too).
        self.own_jobs_only = own_jobs_only
        self.owners = RunOwners()  # who created which run: on Spaces, who may curate it (studio.curation_rights)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._events: deque[dict[str, Any]] = deque(maxlen=max_events)
        self._state: dict[str, Any] = {"status": "idle"}

    # -- starting and stopping -------------------------------------------------------------------------------

    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def submit(self, label: str, run_id: str, fn: JobFn, user: str = "", session: str | None = None) -> str | None:
        """Start ``fn(progress, should_stop) -> status`` on the worker thread; a message when refused. ``user``: the
        starter's curator name ("" when none was given); ``session``: the starting page's session id (None: no page
        started it, or the caller does not say), for the refusal another press gets (``started_by``)."""
        if self.read_only:
            return "This studio is read-only: jobs cannot be started."
        with self._lock:
            refused = self._busy(session)
            if refused:
                return refused
            self._stop.clear()
            self._events.clear()
            self._state = {"status": "running", "label": label, "run_id": run_id, "user": user, "session": session,
                           "started_at": time.time(), "finished_at": None, "result": None, "error": None}
            self._thread = threading.Thread(target=self._main, args=(fn,), name=f"moat-job-{label}", daemon=True)
            self._thread.start()
        return None

    def busy(self, session: str | None = None) -> str | None:
        """The refusal ``submit`` would give a press from ``session`` now (a read-only worker's, or a job's that
        runs), else ``None``. A check only: a job may start between it and a later ``submit``, which checks again
        (*Start a new run* asks first so a refused press creates no run)."""
        if self.read_only:
            return "This studio is read-only: jobs cannot be started."
        with self._lock:
            return self._busy(session)

    def _busy(self, session: str | None) -> str | None:
        """The running job's refusal (``BUSY_HEAD`` ...), else ``None``; the caller holds ``_lock``."""
        if not self.running():
            return None
        st = self._state
        advice = "Stop it or wait for it to finish." if self._may_stop(session) else "Wait for it to finish."
        return f"{BUSY_HEAD} ({st['label']} on {st['run_id']}, {started_by(st, session, self.owners)}). {advice}"

    def _may_stop(self, session: str | None) -> bool:
        """Whether a page of ``session`` may stop the running job: any page may, but with ``own_jobs_only`` only the
        page that started it, or another page of its browser (``owners``; a job no page started, the first-visit
        demo, then runs to its end)."""
        return not self.own_jobs_only or self.owners.same_owner(self._state.get("session"), session)

    def start_loop(self, kind: str, run_id: str, user: str = "", max_iteration: int | None = None,
                   where: str = "in this studio", session: str | None = None) -> str | None:
        """``next_stage`` | ``rest_of_iteration`` | ``next_iteration`` of a run; a message when refused. With
        ``max_iteration`` a job that would run a stage of a later iteration is refused (``where`` names the place
        the cap holds in the message); ``user`` and ``session`` as ``submit`` takes them."""
        if kind not in LOOP_KINDS:
            raise ValueError(f"kind must be one of {', '.join(LOOP_KINDS)}")
        if self.store.get_run(run_id) is None:
            text = self.store.unknown_run(run_id)
            return text[:1].upper() + text[1:] + ("" if text.endswith("?") else ".")
        if max_iteration is not None:
            refused = past_cap(loop_reach(self.store, run_id, kind), max_iteration, where)
            if refused:
                return refused
        return self.submit(kind, run_id, lambda progress, stop: loop_job(self.store, run_id, kind, progress, stop,
                                                                         max_iteration, where), user=user,
                           session=session)

    def stop(self, user: str = "", session: str | None = None) -> str:
        """Ask the running job to stop; the line saying so, or why not. ``user``/``session`` as ``submit`` takes
        them: the job box names who stopped a job another page started (``stopped_by``)."""
        with self._lock:
            if not self.running():
                return "No job is running."
            state = self._state  # the running job's (replaced whole, under the lock, only when a job starts)
            if not self._may_stop(session):
                starter = started_by(state, session, self.owners)
                return (f"Refused: the job `{state['label']}` on `{state['run_id']}` was {starter}; only the "
                        "browser that started a job can stop it here. It ends by itself.")
            if not self.owners.same_owner(state.get("session"), session) and not state.get("stopped_by"):
                state["stopped_by"] = user or "another page"
            self._stop.set()
        # Named as "Started `kind` on `run`" names it: the Run tab settles this line too once the job has ended.
        return f"Stop requested: the job `{state['label']}` on `{state['run_id']}` stops after the batch in flight."

    def wait(self, timeout: float | None = None) -> bool:
        """Join the job thread (tests, shutdown); True when no job is running afterwards."""
        if self._thread is not None:
            self._thread.join(timeout)
        return not self.running()

    # -- state -------------------------------------------------------------------------------------------------

    def _progress(self, event: dict[str, Any]) -> None:
        with self._lock:
            self._events.append({**event, "time": time.time()})

    def _main(self, fn: JobFn) -> None:
        try:
            result, error = fn(self._progress, self._stop.is_set), None
        except ConfigError as exc:  # bad input, e.g. a checkpoint deleted since it was recorded (refused before the
            result, error = "failed", str(exc)  # stage ran): the message says what to do; a traceback would bury it
        except Exception as exc:  # the stage is already recorded "failed" in the store by engine.loop
            result, error = "failed", f"{exc}\n{traceback.format_exc(limit=4)}"
        with self._lock:
            self._state.update(status="stopped" if result == "stopped" else ("failed" if error else "finished"),
                               result=result, error=error, finished_at=time.time())

    def snapshot(self) -> dict[str, Any]:
        """The current (or last) job: its state (less the starter's session id), the stop flag and the last progress
        events (oldest first)."""
        with self._lock:
            state = dict(self._state)
            state.pop("session", None)  # every page renders the snapshot: one page's session id is not another's
            state["running"] = self.running()
            state["stop_requested"] = self._stop.is_set()
            state["events"] = list(self._events)
        return state


def started_by(state: dict[str, Any], session: str | None, owners: RunOwners) -> str:
    """Who started the job of worker ``state``, as the page asking with ``session`` may be told: that page itself (or
    another page of its browser, as ``owners`` knows them), else the curator name the starter gave (the job box shows
    it to every page already), else only that another page did. Never a session id: it would let one page act as
    another."""
    if owners.same_owner(state.get("session"), session):
        return "started from this page"
    if state.get("user"):
        return f"started by {state['user']}"
    if state.get("session"):
        return "started by another page, no name given"  # a comma, not "(...)": the refusal puts this in parentheses
    return "started with no name given"  # no page recorded: the studio's own first-visit job, or an unknown caller


def loop_target(store: Store, run_id: str, kind: str) -> tuple[int, int | None]:
    """``(iterations, max_stages)`` for ``run_loop`` so it runs the next stage, the rest of the first unfinished
    iteration, or everything through the next iteration not yet started (``max_stages`` 0: nothing to run). *Rest of
    iteration* finishes an iteration within ``run.iterations`` only: on a complete run there is none to finish, and
    starting (and training) a new one is *Next iteration*'s to do."""
    config = run_config(store, run_id)
    horizon = max([config.run.iterations, *store.iterations(run_id)]) + 1
    todo = pending(store, run_id, config, horizon)
    if not todo:
        return horizon, 0
    first = todo[0][0]
    if kind == "next_stage":
        return first, 1
    if kind == "rest_of_iteration":
        return (horizon, 0) if first > config.run.iterations else (first, None)
    started = any(s.get("status") not in (None, "pending") for s in store.stage_status(run_id, first).values())
    return (first + 1 if started else first), None


def loop_reach(store: Store, run_id: str, kind: str) -> int | None:
    """The last iteration a loop job of ``kind`` would run a stage of, as the store stands; None: nothing to run."""
    iterations, max_stages = loop_target(store, run_id, kind)
    return None if max_stages == 0 else iterations


def loop_stages(store: Store, run_id: str, kind: str) -> list[tuple[int, str]]:
    """``(iteration, stage)`` a loop job of ``kind`` would run, in order, as the store stands (``[]``: nothing). A
    stage its config skips is listed too: the job records it ``skipped``."""
    iterations, max_stages = loop_target(store, run_id, kind)
    if max_stages == 0:
        return []
    todo = pending(store, run_id, run_config(store, run_id), iterations)
    return todo if max_stages is None else todo[:max_stages]


def past_cap(reach: int | None, max_iteration: int, where: str) -> str | None:
    """The refusal for a job reaching iteration ``reach`` past ``max_iteration``, else None."""
    if reach is None or reach <= max_iteration:
        return None
    return (f"Refused {where}: **run.iterations** is at most {max_iteration}, and this job would start iteration "
            f"{reach}. Browse what the run made in **Pairs**, **Critic** and **Metrics**, finish an "
            "unfinished iteration with *Rest of iteration*, or press *Start a new run*.")


def loop_job(store: Store, run_id: str, kind: str, progress: Callable[[dict[str, Any]], None],
             should_stop: Callable[[], bool], max_iteration: int | None = None, where: str = "in this studio") -> str:
    iterations, max_stages = loop_target(store, run_id, kind)
    if max_stages == 0:
        return "nothing to run"
    # Again at run time: a job that finished between the request's check and this one may have moved the target.
    refused = past_cap(iterations, max_iteration, where) if max_iteration is not None else None
    if refused:
        return refused
    # Past run.iterations (a complete run continued): recorded as the CLI's `run --iterations N` records it, so the
    # run's config says how far it goes; a target within it records nothing (it would lower run.iterations).
    beyond = iterations > run_config(store, run_id).run.iterations
    return run_loop(store, run_id, iterations=iterations, progress=progress, should_stop=should_stop,
                    max_stages=max_stages, record_iterations=beyond)


def swap_unavailable(store: Store, run_id: str | None) -> str | None:
    """Why the swap table of ``run_id`` cannot be computed now (None: it can): it pairs iteration 0's agents with
    the last evaluated iteration's, so it needs an iteration after 0 whose evaluate stage is done."""
    from engine.swap import evaluated_iterations, swap_refusal

    if not run_id or store.get_run(run_id) is None:
        return "Pick a run first."
    refusal = swap_refusal(run_config(store, run_id))
    if refusal:
        return f"Run `{run_id}`: {refusal}."
    evaluated = [t for t in evaluated_iterations(store, run_id) if t > 0]
    if not evaluated:
        return (f"Run `{run_id}` has no iteration after 0 whose evaluate stage is done: the swap table pairs "
                "iteration 0's agents with a later iteration's, so it needs one.")
    return None


def swap_job(store: Store, run_id: str) -> Callable[[Callable[[dict[str, Any]], None], Callable[[], bool]], str]:
    """A job computing and storing ``engine.swap.swap_table`` of ``run_id`` (base 0, after: the last evaluated
    iteration), as ``python -m engine swap`` does: that command cannot run beside the studio, which holds the store.
    Stopping it keeps nothing (the table is written whole at the end)."""
    from engine.errors import StageStopped
    from engine.swap import swap_table

    def job(progress: Callable[[dict[str, Any]], None], should_stop: Callable[[], bool]) -> str:
        try:
            swap_table(store, run_id, progress=progress, should_stop=should_stop)
        except StageStopped:
            return "stopped"
        return "done"
    return job
