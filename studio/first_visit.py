"""A first visit lands on something to look at, not on an empty run picker.

With ``first_visit`` on (``python app.py --first-visit-demo``; on by default on Spaces) and a writable store holding
no run yet, ``start_showcase`` creates a one-iteration demo run from the studio's config (capped to the Spaces
limits on Spaces) and starts it in the studio's job worker at once: the iteration-0 evaluation, then one MOAT
iteration (plans, pairs, DPO, groundings, critic verdicts, SFT, evaluation). ``welcome(store, jobs, run_id)`` is the
one paragraph the page shows, from the run's state in the store and the worker each time it is asked: ``WELCOME``
while the run is being prepared (what is happening, how long it takes), ``FINISHED`` once every stage is done (where
to look), ``UNFINISHED`` when it stopped or failed before that (where to see why, how to continue).
"""

from __future__ import annotations

from engine.config import load_config
from engine.loop import create_run, pending, run_config, run_loop
from engine.store import Store
from studio.common import spaces_capped
from studio.jobs import JobWorker

SHOWCASE_NAME = "demo-first-visit"

# Measured alone on 2 idle cores with the demo config: iteration-0 evaluation 28 s, one iteration 94-103 s
# (README, "Results on the demo world"); Spaces caps make it shorter.
WELCOME = (
    "**Welcome.** A demo run is being prepared for you: the starting planner and grounder are evaluated, then one "
    "MOAT iteration runs (the planner samples plans, the grounder scores them, DPO trains the planner on the "
    "best-vs-worst pairs, the critic checks the grounder's actions, SFT trains the grounder). It takes about 2-3 "
    "minutes on 2 CPU cores; the **Run** tab shows each stage as it goes. Then look at **Pairs** (which plan the "
    "grounder preferred, and by how much), **Critic** (the corrections the grounder learns from) and **Metrics** "
    "(accuracy before and after). To start your own, press *Start a new run* in the **Run** tab (its config is "
    "under *Advanced*)."
)
FINISHED = (
    "**Welcome.** The demo run `{run_id}` is ready: the starting planner and grounder were evaluated, then one MOAT "
    "iteration ran. Look at **Pairs** (which plan the grounder preferred, and by how much: iteration 1), **Critic** "
    "(the corrections the grounder learnt from) and **Metrics** (accuracy before and after); the **Run** tab says "
    "what each stage did. To start your own, press *Start a new run* in the **Run** tab (its config is under "
    "*Advanced*)."
)
UNFINISHED = (
    "**Welcome.** The demo run `{run_id}` stopped before it finished: the **Run** tab shows where and why, and "
    "*Rest of iteration* there continues it. What it made so far is in **Pairs**, **Critic** and **Metrics**."
)


def start_showcase(store: Store, jobs: JobWorker, config_path: str, spaces: bool) -> str | None:
    """Create and start the demo run when the store is empty and writable; its run id, or None when nothing was
    started (a store with runs is never touched)."""
    if jobs.read_only or store.list_runs() or jobs.running():
        return None
    config = load_config(config_path)
    if spaces:
        config = spaces_capped(config)
    config.run.name, config.run.iterations = SHOWCASE_NAME, 1
    run_id = create_run(store, config)
    refused = jobs.submit("first visit: a demo run", run_id,
                          lambda progress, stop: run_loop(store, run_id, iterations=1, progress=progress,
                                                          should_stop=stop))
    return None if refused else run_id


def welcome(store: Store, jobs: JobWorker, run_id: str) -> tuple[str, bool]:
    """``(paragraph, settled)`` for the demo run ``run_id`` as it stands (see the module docstring); ``settled``:
    finished, so the paragraph will not change again and the page may stop asking."""
    config = run_config(store, run_id)
    if not pending(store, run_id, config, config.run.iterations):
        return FINISHED.format(run_id=run_id), True
    snap = jobs.snapshot()
    if snap["running"] and snap.get("run_id") == run_id:
        return WELCOME, False
    return UNFINISHED.format(run_id=run_id), False
