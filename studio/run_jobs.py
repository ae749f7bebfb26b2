"""The Run tab's job lines, as plain functions of the store and the shared ``JobWorker`` (the Gradio wiring is
``studio.tab_run.build``): what a job button does (``start_job``: the write guard, on Spaces a run the page created,
the policy and the iteration cap, then the job; the server decides, whatever the page sends), what the job will run,
said in the line that announces it (``job_plan``: the stage a *Next stage* job runs, always; a job past the run's
``run.iterations`` says that it raises it, as the job does: ``studio.jobs``), *Start a new run*'s job
(``start_first_iteration``: the iteration-0 evaluation, then iteration 1), the worker's state as markdown
(``job_markdown``: each stage's progress and ETA while the job runs, how each stage stands once it has ended), and
the announcing line turned into how the job ended once it has, as is a press refused while it ran
(``settled_message``; a created run's cautions stay below it). Each job records the browser session that started it
(``studio.common.session_of``), so a press refused while it runs can say "started from this page"
(``studio.jobs.started_by``); *Start a new run* records that session as the new run's creator too
(``studio.run_owners``: on a Space, the page that may curate it and run its jobs).
"""

from __future__ import annotations

import time
from typing import Any

import gradio as gr

from engine.errors import ConfigError
from engine.loop import is_skipped, pending, run_config, run_loop
from engine.schedule import iteration_config
from engine.store import Store
from studio.common import Ctx, check_writable, session_of, who_of
from studio.jobs import BUSY_HEAD, JobWorker, loop_stages
from studio.render import md_escaped
from studio.spaces_policy import SPACES_CAPS, spaces_policy
from studio.stage_text import shown_status

# The line *Start a new run* ends with while its job runs (``settled_message`` replaces it once the job has ended).
RUNNING_NOTE = "are running: the pipeline below follows them."
# How ``job_plan`` begins when a job would run no stage (``start_job`` then starts none).
NOTHING_LEFT = ": nothing is left to run"


def start_job(ctx: Ctx, kind: str, run_id: str | None, name: str, request: gr.Request | None) -> str:
    """What a job button (``next_stage`` / ``rest_of_iteration`` / ``next_iteration``) does: the write guard, on
    Spaces a run this page created (``studio.run_owners``), the policy and the iteration cap, then the job on the
    shared worker; the line the page shows."""
    check_writable(ctx, request)
    if not run_id:
        return "Pick or create a run first."
    max_iteration = None
    if ctx.spaces and not ctx.jobs.owners.created_by(run_id, session_of(request)):
        # As with curation (studio.curation_rights): a job on another visitor's run would change what that visitor
        # sees and trains, and they could not stop it (a page stops only the job it started).
        return ("Refused on Spaces: this browser did not start this run (the demo run, another visitor's, or one "
                "from before a restart of the Space). A browser runs jobs only on the runs it starts: *Start a new "
                "run* gives you your own.")
    if ctx.spaces and ctx.store.get_run(run_id) is not None:
        try:  # a run put in the store by other means must still pass the Spaces policy
            spaces_policy(run_config(ctx.store, run_id))
        except ConfigError as exc:
            return f"Refused on Spaces: {exc}"
        # The policy checks the config's run.iterations, but each press may start one iteration past it: the
        # worker caps the iterations the job runs.
        max_iteration = dict(SPACES_CAPS)["run.iterations"]
    # Described before the job starts: once it runs, the store (and run.iterations) moves under the description.
    plan = job_plan(ctx.store, run_id, kind) if ctx.store.get_run(run_id) is not None else ""
    if plan.startswith(NOTHING_LEFT):  # no job to start: say so rather than announce one that does nothing
        if max_iteration is not None:  # Spaces: no further iteration to point at
            plan = plan.replace(" *Next iteration* starts another.", "")
        return f"Nothing started: `{kind}` on `{run_id}` would run nothing{plan.removeprefix(NOTHING_LEFT)}"
    refused = ctx.jobs.start_loop(kind, run_id, user=who_of(name, request) or "", max_iteration=max_iteration,
                                  where="on Spaces", session=session_of(request))
    return refused or f"Started `{kind}` on `{run_id}`{plan}"


def job_plan(store: Store, run_id: str, kind: str) -> str:
    """What a loop job of ``kind`` will run, as the rest of its "Started `kind` on `run`" line (from ``": "`` or
    ``". "`` to the final period; ``studio.jobs.loop_stages``): the stage a one-stage job runs (and why the run
    skips it, when it does), else how many stages of which iterations from which stage. A job that goes past the
    run's ``run.iterations`` says so: "The run is complete (1 of 1 iterations): this starts iteration 2 (stage
    **sample**) and raises **run.iterations** to 2, ...", as the job does (``studio.jobs.loop_job``). A run whose
    config no longer validates gets ``"."``: the job's own error says why."""
    try:
        todo, config = loop_stages(store, run_id, kind), run_config(store, run_id)
    except ConfigError:
        return "."
    if not todo:
        if kind == "rest_of_iteration" and not pending(store, run_id, config, config.run.iterations):
            return (f"{NOTHING_LEFT}: the run is complete ({config.run.iterations} of {config.run.iterations} "
                    "iterations). *Next iteration* starts another.")
        return f"{NOTHING_LEFT}."
    (first, stage), last = todo[0], todo[-1][0]
    planned = config.run.iterations
    # A complete run's job runs only the new iteration: its stages are named inside the sentence that says so.
    complete = last > planned and not pending(store, run_id, config, planned)
    of = "" if complete else f" of iteration {first}"
    if len(todo) == 1:
        what = f"stage **{stage}**{of}"
        skipped = is_skipped(stage, iteration_config(config, first), first)
        if skipped:  # the job only records it: say so, or the press looks like it did nothing
            what += f", which this run skips ({md_escaped(skipped)}): the job records it skipped"
    elif complete:
        what = f"{len(todo)} stages, from **{stage}**"
    else:
        span = f"iteration {first}" if first == last else f"iterations {first}–{last}"
        what = f"{len(todo)} stages of {span}, from **{stage}**" + (of if first != last else "")
    if last <= planned:
        return f": {what}."
    raised = (f"raises **run.iterations** from {planned} to {last}, as the CLI's `run --iterations {last}` does (a "
              "later resume finishes it)")
    if complete:
        verb = "starts" if len(todo) == 1 else "runs"
        return (f". The run is complete ({planned} of {planned} iterations): this {verb} iteration {last} ({what}) "
                f"and {raised}.")
    return f": {what}. Iteration {last} lies past the run's **run.iterations** ({planned}): the job {raised}."


def start_first_iteration(store: Store, jobs: JobWorker, run_id: str, user: str = "",
                          session: str | None = None) -> str | None:
    """*Start a new run*'s job: the iteration-0 evaluation and then iteration 1, as the first-visit demo run does (a
    "next iteration" job on a fresh run stops after iteration 0, which left a new run with nothing in Pairs or
    Critic). Within the Spaces cap of one iteration. A message when refused. ``user``, ``session``: who started it,
    as ``JobWorker.submit`` takes them. ``run_id`` is the run that page has just created (*Start a new run* creates
    it, then calls this): ``session`` is recorded as its creator (``JobWorker.owners``), even when the job is refused,
    so on a Space that page may curate it (``studio.curation_rights``)."""
    jobs.owners.record(run_id, session)
    return jobs.submit("start_new", run_id, lambda progress, stop: run_loop(store, run_id, iterations=1,
                                                                            progress=progress, should_stop=stop),
                       user=user, session=session)


def job_markdown(jobs: JobWorker) -> str:
    """The worker's job as markdown: state, the latest event per stage and the log tail. While the job runs each
    stage's line is its progress (counts, ETA); once it has ended, how the stage stands (``_settled_stages``) and
    the count it reached, no ETA: a last progress line left as it was read as if the job still ran."""
    snap = jobs.snapshot()
    if snap["status"] == "idle":
        return "No job has run in this studio yet."
    took = (snap["finished_at"] or time.time()) - snap["started_at"]
    lines = [f"**Job** `{snap['label']}` on `{snap['run_id']}` — **{snap['status']}**"
             f"{' (stop requested)' if snap['stop_requested'] and snap['running'] else ''} · {took:.0f}s"
             f"{' · by ' + snap['user'] if snap.get('user') else ''}"
             f"{' · stop asked by ' + snap['stopped_by'] if snap.get('stopped_by') else ''}"]
    result = None if snap["running"] else _result_words(snap.get("result"))
    if result:
        lines.append(f"Result: {result}")
    if snap.get("error"):
        lines.append(f"```\n{snap['error'][-800:]}\n```")
    latest: dict[tuple, dict] = {}
    for e in snap["events"]:
        latest[(e.get("iteration"), e.get("stage"))] = e
    settled = None if snap["running"] else _settled_stages(jobs.store, snap, list(latest))
    for (it, stage), e in latest.items():
        done = f"{e.get('done')}/{e.get('total')}" if e.get("total") else "started"  # 0/0: its opening event
        if settled is None:
            eta = f", ETA {e['eta_s']:.0f}s" if e.get("eta_s") is not None else ""
            lines.append(f"- iteration {it} · {stage}: {done}{eta}")
        elif settled[(it, stage)] == "done":
            lines.append(f"- iteration {it} · {stage}: done" + (f" ({done})" if e.get("total") else ""))
        else:
            lines.append(f"- iteration {it} · {stage}: {settled[(it, stage)]} at {done}")
    tail = [f"{time.strftime('%H:%M:%S', time.localtime(e['time']))} {e.get('stage')} {e.get('done')}/"
            f"{e.get('total')} {e.get('message', '')}" for e in snap["events"][-8:]]
    if tail:
        lines.append("```\n" + "\n".join(tail) + "\n```")
    return "\n\n".join(lines)


# What an ended job's ``result`` (``engine.loop.run_loop``: "done", "paused", "stopped"; ``studio.jobs``: "failed",
# "nothing to run", a Spaces cap's refusal; the swap job: "done", "stopped") adds to its state: None when the state
# ("finished", "stopped", "failed") already says it. "paused" is run_loop's word for a job that ran the stages it
# was asked for (*Next stage*, *Rest of iteration*) and left the rest of the run pending: finished, for the page.
RESULT_WORDS: dict[str, str | None] = {"done": None, "paused": None, "stopped": None, "failed": None,
                                       "nothing to run": "nothing was left to run"}


def _result_words(result: str | None) -> str | None:
    """An ended job's ``result`` as the job box's "Result:" line, None when it would repeat the state; any other
    value (a refusal the job gave when it began computing) as it is."""
    if not result:
        return None
    return RESULT_WORDS.get(result, result)


def _settled_stages(store: Store, snap: dict[str, Any], stages: list[tuple[Any, Any]]) -> dict[tuple, str]:
    """How each ``(iteration, stage)`` an ended job reported on stands: the store's state of the stage (``stopped``,
    ``failed``, ``done``; a stage recorded ``running`` no job runs shows ``interrupted``, as the pipeline does), else
    (a job's step the store keeps no stage of, e.g. the swap table's) the job's own end for the last one it reported
    on and ``done`` for those before it."""
    ended = {"stopped": "stopped", "failed": "failed"}.get(snap.get("status"), "done")
    states = {key: "done" for key in stages}
    if stages:
        states[stages[-1]] = ended
    records: dict[int, dict[str, dict[str, Any]]] = {}
    for it, stage in stages:
        if not isinstance(it, int) or not snap.get("run_id"):
            continue
        if it not in records:
            records[it] = store.stage_status(snap["run_id"], it)
        status = (records[it].get(stage) or {}).get("status")
        if status and status != "pending":
            states[(it, stage)] = shown_status(status, live=False)
    return states


def settled_message(message: str | None, snap: dict[str, Any]) -> str | None:
    """The Run tab's message once the job it announced has ended (``None``: leave it as it is). A job button says
    "Started `kind` on `run`..." (``job_plan``), *Stop* "Stop requested: the job `kind` on `run` stops after ..." and
    *Start a new run* "... are running: the pipeline below follows them."; once the worker's job (``snap``,
    ``JobWorker.snapshot``) is that job and no longer runs, the line says how it ended instead, the created run's
    cautions (``cautions_markdown``) still below it. A press refused while a job ran (``studio.jobs.BUSY_HEAD``)
    settles too once no job runs: the same line, then that the press can be made again (a refusal about an older
    job than the worker's last one: that the job has ended). Any other message (a refusal of another kind, a created
    run, a newer job's) stays."""
    if not message or snap.get("running") or snap.get("status") in (None, "idle"):
        return None
    run, label = snap.get("run_id"), snap.get("label")
    tail = ""
    if message.startswith(f"Started `{label}` on `{run}`") or message.startswith(
            f"Stop requested: the job `{label}` on `{run}`"):  # the stop line said "stops after the batch" for good
        head, cautions = "", ""
    elif message.startswith(f"{BUSY_HEAD} ({label} on {run}, "):
        # A press refused while this job ran: left as it was, it said "already running" above a job box saying
        # the job had ended, and on the page that started the job it had replaced the "Started" line for good.
        head, cautions, tail = "", "", " The press it refused can be made again now."
    elif message.startswith(BUSY_HEAD):  # a refusal about an older job: the worker runs none now
        return "The job that refused this press has ended: press again."
    elif label == "start_new" and RUNNING_NOTE in message and f"`{run}`" in message:
        head = message.split(" The starting agents'")[0].rstrip() + " "
        cautions = message.partition(RUNNING_NOTE)[2]  # with_note put them after the note
    else:
        return None
    took = (snap.get("finished_at") or time.time()) - (snap.get("started_at") or time.time())
    status, result = snap.get("status"), snap.get("result")
    ended = {"failed": "failed (the error is below)", "stopped": "was stopped"}.get(
        status, "finished" if result in (None, "done", "paused") else f"ended: {result}")  # paused: its stages ran
    return f"{head}The job `{label}` on `{run}` {ended} after {took:.0f} s.{tail}{cautions}"
