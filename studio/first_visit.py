"""A first visit lands on something to look at, not on an empty run picker.

With ``first_visit`` on (``python app.py --first-visit-demo``; on by default on Spaces) and a writable store holding
no run yet, ``start_showcase`` creates a one-iteration demo run from the studio's config (capped to the Spaces
limits on Spaces) and starts it in the studio's job worker at once: the iteration-0 evaluation, then one MOAT
iteration (plans, pairs, DPO, groundings, critic verdicts, SFT, evaluation). ``welcome(store, jobs, run_id)`` is the
one paragraph the page shows, from the run's state in the store and the worker each time it is asked: ``WELCOME``
while the run is being prepared (what is happening, how long it usually takes, and a line saying which stage is under
way and how long the run has taken so far), ``FINISHED`` once every stage is done (where to look, and what one small
iteration moves: the capability gap first, accuracy on its few evaluation tasks perhaps not yet), ``UNFINISHED`` when
it stopped or failed before that (where to see why, how to continue; on a Space, where the demo run is every
visitor's and read-only, to start one's own instead: ``UNFINISHED_ON_SPACES``, and ``FINISHED`` says it is
read-only there, ``SHARED_ON_SPACES``). Each ends with the demo run's config cautions
(``engine.preflight``: it runs, but likely not as meant; ``studio.new_run_config.cautions_markdown``), when it has
any: a visitor never sees the server's stderr. They are read through ``studio.run_cautions``, the cache the Run tab's
box reads too, which ``start_showcase`` seeds with the cautions it computed creating the run: the welcome, asked
every 2 s, runs no preflight of its own while the cache keeps them.

How long it takes is said only for the demo agents at the sizes measured (``expected_duration``); for other agents
the live line is all the visitor gets, rather than a figure that was never measured for them.

The demo run is the store's first run named ``SHOWCASE_NAME`` (``showcase_run``): on Spaces a session with no saved
place opens on it (``studio.place.pick_run``'s ``landing``), the run the welcome talks about, rather than on the
newest run, which there is often another visitor's experiment under way.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from engine.config import RunConfig, load_config
from engine.loop import STAGES, create_run_with_cautions, pending, run_config, run_loop
from engine.report_markdown import duration_text
from engine.store import Store
from studio.jobs import JobWorker
from studio.new_run_config import cautions_markdown, tasks_used
from studio.pipeline import label
from studio.run_cautions import remember, run_cautions
from studio.spaces_policy import DEMO_AGENTS, SPACES_CAPS, spaces_capped
from studio.stage_text import objectives

SHOWCASE_NAME = "demo-first-visit"
DEMO_TASKS = "examples/demo/tasks.jsonl"

# The first-visit run (iteration-0 evaluation + one iteration), measured alone on 2 idle cores of an AMD EPYC with
# AVX2 only on 2026-12-06 (README, *Studio*): at the Spaces caps 52 s; at the demo config's own sizes (96 training
# tasks x K = 15, all 450 evaluation tasks) 5 min 23 s; on an Intel Xeon, earlier, about 2 min (iteration-0
# evaluation 28 s, one iteration 94-103 s).
# python -m engine run --config examples/demo.toml --set run.iterations=1 [--set data.train_limit=16
#     --set data.eval_limit=20 --set sample.k=4] --db /tmp/fv.duckdb --set run.workdir=/tmp/fv --quiet
CAPPED_DURATION = "under a minute on 2 CPU cores"
FULL_DURATION = "2 to 6 minutes on 2 CPU cores, by the CPU"

WELCOME = (
    "**Welcome.** A demo run is being prepared for you: the starting planner and grounder are evaluated, then one "
    "MOAT iteration runs (the planner samples plans, the grounder scores them, DPO trains the planner on the "
    "best-vs-worst pairs, the critic checks the grounder's actions, SFT trains the grounder). {how_long}The "
    "**Run** tab shows each stage as it goes. Then look at **Pairs** (which plan the grounder preferred, and by how "
    "much), **Critic** (the corrections the grounder learns from) and **Metrics** (the capability gap and accuracy, "
    "before and after). To start your own, press *Start a new run* in the **Run** tab (its config is under "
    "*Advanced*).\n\n{now}"
)
HOW_LONG = "It usually takes {duration}. "
NOW = "*Now:* {where} · {elapsed} so far."
FINISHED = (
    "**Welcome.** The demo run `{run_id}` is ready: the starting planner and grounder were evaluated, then one MOAT "
    "iteration ran. Look at **Pairs** (which plan the grounder preferred, and by how much: iteration 1), **Critic** "
    "(the corrections the grounder learnt from) and **Metrics**, where after one small iteration the *capability "
    "gap* chart (the grounder's perplexity of the gold actions, lower is better) is what moves first: accuracy on "
    "{evaluated} evaluation tasks may not move yet (the README's experiments show the full effect over 3 iterations "
    "and 5 seeds). The **Run** tab says what each stage did. To start your own, press *Start a new run* in the "
    "**Run** tab (its config is under *Advanced*)."
)
UNFINISHED = (
    "**Welcome.** The demo run `{run_id}` stopped before it finished: the **Run** tab shows where and why, and "
    "*Rest of iteration* there continues it. What it made so far is in **Pairs**, **Critic** and **Metrics**."
)
# On a Space the demo run is every visitor's (``studio.curation_rights``, ``studio.run_jobs.start_job``): no page may
# curate or continue it, so the welcome says so and points to a run of one's own instead.
SHARED_ON_SPACES = (
    " On this Space the demo run is shared by every visitor, so it is read-only: a run you start is yours to curate "
    "(Pairs, Critic) and continue."
)
UNFINISHED_ON_SPACES = (
    "**Welcome.** The demo run `{run_id}` stopped before it finished: the **Run** tab shows where and why. It is "
    "shared by every visitor of this Space, so nobody continues it here: press *Start a new run* in the **Run** tab "
    "for one of your own. What the demo run made so far is in **Pairs**, **Critic** and **Metrics**."
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
    run_id, cautions = create_run_with_cautions(store, config)
    remember(store, run_id, cautions)  # its welcome (every 2 s) and the Run tab's box read them, not preflight again
    refused = jobs.submit("first visit: a demo run", run_id,
                          lambda progress, stop: run_loop(store, run_id, iterations=1, progress=progress,
                                                          should_stop=stop))
    return None if refused else run_id


def showcase_run(runs: list[dict[str, Any]]) -> str | None:
    """The first-visit demo run among ``runs`` (``Store.list_runs``' rows, oldest first): the oldest named
    ``SHOWCASE_NAME`` (``start_showcase`` makes it in an empty store, so a visitor's run of that name comes later);
    None when there is none."""
    return next((row["run_id"] for row in runs if row.get("name") == SHOWCASE_NAME), None)


def welcome(store: Store, jobs: JobWorker, run_id: str) -> tuple[str, bool]:
    """``(paragraph, settled)`` for the demo run ``run_id`` as it stands (see the module docstring), its cautions
    below it; ``settled``: finished, so the paragraph will not change again and the page may stop asking."""
    config = run_config(store, run_id)
    cautions = cautions_markdown(run_cautions(store, run_id) or [])
    spaces = jobs.own_jobs_only  # a Space's worker (studio.app): the demo run is shared and read-only there
    if not pending(store, run_id, config, config.run.iterations):
        finished = FINISHED.format(run_id=run_id, evaluated=tasks_used(store, run_id, config)[2])
        return finished + (SHARED_ON_SPACES if spaces else "") + cautions, True
    snap = jobs.snapshot()
    if snap["running"] and snap.get("run_id") == run_id:
        duration = expected_duration(config)
        return WELCOME.format(how_long=HOW_LONG.format(duration=duration) if duration else "",
                              now=under_way(store, run_id, snap)) + cautions, False
    return (UNFINISHED_ON_SPACES if spaces else UNFINISHED).format(run_id=run_id) + cautions, False


def expected_duration(config: RunConfig) -> str | None:
    """How long the first-visit run usually takes, for the configurations it was measured at: the demo agents at
    the Spaces caps, or at ``examples/demo.toml``'s sizes (or smaller); None for anything else (other agents, more
    tasks, larger K), which was never measured."""
    if (config.planner.path, config.grounder.path) != DEMO_AGENTS or config.planner.adapter or config.grounder.adapter:
        return None
    sizes = {dotted: getattr(getattr(config, dotted.split(".")[0]), dotted.split(".")[1]) for dotted, _ in SPACES_CAPS}
    if all(0 < sizes[dotted] <= cap for dotted, cap in SPACES_CAPS):
        return CAPPED_DURATION
    # At most the demo config's own sizes, on its task file (eval_limit 0: every task, 450 in the demo world).
    demo_tasks = Path(config.data.tasks).resolve() == Path(DEMO_TASKS).resolve()
    if demo_tasks and 0 < sizes["data.train_limit"] <= 96 and sizes["sample.k"] <= 15 and sizes["run.iterations"] <= 1:
        return FULL_DURATION
    return None


def under_way(store: Store, run_id: str, snapshot: dict[str, Any]) -> str:
    """``NOW`` for a running job: the stage the store marks running (the first card of the **Run** tab's pipeline
    that is under way) and the time since the job started."""
    where = "getting ready"
    for iteration in reversed(store.iterations(run_id)):
        running = [name for name, row in store.stage_status(run_id, iteration).items() if row["status"] == "running"]
        if running and iteration == 0 and running[0] == "evaluate":
            where = "evaluating the starting planner and grounder"
            break
        if running:
            stage = label(running[0], objectives(store, run_id, iteration))
            where = f"iteration {iteration}, stage {stage} (of {len(STAGES)})"
            break
    elapsed = max(0.0, time.time() - float(snapshot.get("started_at") or time.time()))
    return NOW.format(where=where, elapsed=duration_text(elapsed))
