"""Run tab: *Start a new run* (create a run from the config and run its first iteration), drive the shared
``JobWorker`` (next stage / rest of iteration / next iteration / stop) and watch it: the iteration as a pipeline of
stage cards with progress bars, ETA and one human line each (``studio.pipeline``, ``studio.stage_text``), the job's
log tail beside TRL loss curves (one panel per role, each line named by its iteration and objective), every stage of
the run in a full-width table (``stage_table``; its summary column wraps), refreshed by a ``gr.Timer`` (every 2 s
while a job runs, 10 s otherwise: ``studio.pace``; only what changed since the session last drew it is sent:
``studio.redraw``); the same refresh turns the line that announced a job, or *Stop*'s, into how the job ended once it
has. Under that line, the picked run's cautions (``picked_run_cautions``: the line that listed them when the run
was created is gone after a reload). What the job buttons do and say is ``studio.run_jobs``. Under *Advanced*: the
config for a NEW run (the one *Start a new run* and *Create run* use; ``--config``, the demo's by default, or the
picked run's config loaded with *Start from the picked run's config*), edited in the page (``EDITOR_MAX_LINES`` tall,
then it scrolls), validated with field-level errors and its cautions, the equivalent CLI command, and *Create run*
without starting it: the handlers are ``studio.new_run_config``.

Creating a run and every job button are write endpoints: ``check_writable`` refuses them server side for
``--read-only`` and viewers (a viewer's *Validate* checks the fields only), and the buttons register in
``Ctx.write_controls`` (off for a viewer). This module holds the wiring (``build``) and the stage table; the
handlers are plain functions of the store / worker / text in the two modules above.
"""

from __future__ import annotations

from pathlib import Path

import gradio as gr
import pandas as pd

from engine.config import RunConfig, load_config
from engine.errors import ConfigError
from engine.store import Store
from studio.common import Ctx, check_writable, session_of, who_of
from studio.new_run_config import (
    CAUTION_HEAD,
    cautions_markdown,
    check_config,
    cli_command,
    config_toml,
    create_run_from_text,
    new_run_workdir,
    picked_config,
    with_note,
)
from studio.pace import RUN_TAB_BUSY_S, poll_seconds
from studio.pipeline import pipeline_html
from studio.redraw import computed, only_changed, signature
from studio.relay import own_change
from studio.run_cautions import run_cautions
from studio.run_jobs import (
    RUNNING_NOTE,
    job_markdown,
    settled_message,
    start_first_iteration,
    start_job,
)
from studio.run_loss import loss_figure as loss_figure  # the Run tab's loss chart, importable from here as before
from studio.spaces_policy import spaces_capped
from studio.stage_text import shown_status, stage_seconds, stage_summary

# The stage table's columns, also its headers before the run has any stage; their widths (the summary, a sentence,
# gets the room and wraps: it was cut off mid-word). The stage column holds the longest stage name ("train_grounder",
# 14 monospace characters, ~140 px with padding) at the table's 1000 px minimum (studio.app.TABLE_CSS, which also
# keeps it on one line): at 12% a narrow page showed "train_planne / r".
STAGE_COLUMNS = ["iteration", "stage", "status", "summary", "seconds", "error"]
STAGE_WIDTHS = ["10%", "15%", "8%", "49%", "8%", "10%"]
# The config editor's height in lines: past it the editor scrolls (the whole config, ~250 lines, made the page
# ~6,000 px tall).
EDITOR_MAX_LINES = 30


def picked_run_cautions(store: Store, run_id: str | None, shown: str | None = None) -> str:
    """The picked run's cautions (``studio.run_cautions``: a config that runs, but likely not as meant; checked once
    per run and config in this process, as the first-visit welcome's) as markdown for the box under the Run tab's
    message, headed by the run's id: the message that listed them when the run was created is gone after a page
    reload or another job's line. ``""`` for no run, a run without cautions, or while ``shown`` (the message above)
    already lists this run's (*Start a new run*'s line keeps them). A check that fails unexpectedly also gives ``""``
    (logged, not cached): an optional box never stops the tab's refresh."""
    if not run_id or (shown and CAUTION_HEAD in shown and f"`{run_id}`" in shown):
        return ""
    cautions = run_cautions(store, run_id)
    return f"Run `{run_id}`:{cautions_markdown(cautions)}" if cautions else ""


def stage_table(store: Store, run_id: str | None, live: bool = False) -> pd.DataFrame:
    """Every stage of the run; ``live``: this studio's job is running it. Otherwise a stage still marked
    ``running`` was interrupted (a killed process: this studio holds the file, so nobody else can be running it)
    and shows so until a job resumes it. A stopped stage's row says "stopped" once: its summary says what it kept
    and how it goes on (``studio.stage_text.resume_line``), its error column stays empty."""
    rows = []
    for it in store.iterations(run_id) if run_id else []:
        for stage, s in store.stage_status(run_id, it).items():
            status = shown_status(s["status"], live)
            # A stop's recorded "error" ("sample stopped at the user's request") only says "stopped" again.
            error = "" if status == "stopped" else (s["error"] or "")[:160]
            rows.append({"iteration": it, "stage": stage, "status": status,
                         "summary": stage_summary(store, run_id, it, stage, status, s["counts"]),
                         "seconds": stage_seconds(s), "error": error})
    return pd.DataFrame(rows, columns=STAGE_COLUMNS)


def build(ctx: Ctx, config_path: str) -> None:
    # Read as given, never "" when missing: an empty editor hid a mistyped --config (app.py refuses one first).
    text = Path(config_path).read_text(encoding="utf-8")
    if ctx.spaces:  # start from a config Spaces accepts (over-cap sizes are refused, not silently cut)
        try:
            text = config_toml(spaces_capped(load_config(config_path)))
        except ConfigError:
            text = config_toml(spaces_capped(RunConfig()))
    ws = ctx.workspace
    with gr.Row():
        start_btn = gr.Button("Start a new run", variant="primary", interactive=not ctx.read_only, scale=0,
                              elem_id="run-start-new")
        labels = (("next_stage", "Next stage"), ("rest_of_iteration", "Rest of iteration"),
                  ("next_iteration", "Next iteration"))
        buttons = {kind: gr.Button(label, interactive=not ctx.read_only, elem_id=f"run-{kind}", scale=0)
                   for kind, label in labels}
        stop_btn = gr.Button("Stop", variant="stop", interactive=not ctx.read_only, elem_id="run-stop", scale=0)
    gr.Markdown("*Start a new run* creates a run from the config for a new run under **Advanced** (the demo's by "
                "default, or the picked run's once loaded there) and runs its first iteration; the other buttons "
                "continue the run picked above, one stage, the rest of an iteration or a whole next iteration at a "
                "time.")
    message = gr.Markdown(elem_id="run-message")
    cautions = gr.Markdown(elem_id="run-cautions")  # the picked run's, after a reload too (picked_run_cautions)
    pipeline = gr.HTML(elem_id="run-pipeline")
    with gr.Row(elem_id="run-job-row"):  # stacked on a phone (studio.app.TABLE_CSS)
        job = gr.Markdown(job_markdown(ctx.jobs), elem_id="run-job")
        loss = gr.Plot(label="Loss", elem_id="run-loss")
    # The page's width for the table, its summary wrapping (beside the chart, at ~1400 px, it was cut off).
    # Headers and an empty frame from the start: without them Gradio draws "1 2 3" until a stage exists.
    stages = gr.Dataframe(stage_table(ctx.store, None), headers=STAGE_COLUMNS, label="Every stage of the run",
                          interactive=False, elem_id="run-stages", wrap=True, column_widths=STAGE_WIDTHS)
    # This box is the config of the NEXT run (Start a new run / Create run read it), never the picked run's.
    with gr.Accordion("Advanced: config for a new run (TOML)", open=False, elem_id="run-advanced"):
        editor = gr.Code(value=text, label=f"Config for a new run (TOML; starts as {Path(config_path).name}, not the "
                         "picked run's)", lines=18, max_lines=EDITOR_MAX_LINES, elem_id="run-config")
        with gr.Row():
            from_picked = gr.Button("Start from the picked run's config", elem_id="run-from-picked",
                                    visible=not ctx.spaces)
            validate_btn = gr.Button("Validate", elem_id="run-validate")
            create_btn = gr.Button("Create run (without starting it)", interactive=not ctx.read_only,
                                   elem_id="run-create")
        ctx.write_controls += [start_btn, *buttons.values(), stop_btn, create_btn]  # off for a viewer (studio.app)
        verdict = gr.Markdown(elem_id="run-validation")
        command = gr.Textbox(label="Equivalent CLI command", interactive=False, elem_id="run-cli",
                             value=cli_command(config_path, text, ctx.spaces, ws))
    timer = gr.Timer(poll_seconds(ctx.jobs, RUN_TAB_BUSY_S))  # re-paced by each refresh (studio.pace)

    def on_validate(t: str, request: gr.Request) -> tuple[str, str]:
        try:
            check_writable(ctx, request)
            deep = True
        except gr.Error:  # who cannot create a run gets the field checks only (see check_config)
            deep = False
        return check_config(t, ctx.spaces, ws, deep), cli_command(config_path, t, ctx.spaces, ws)

    def on_from_picked(run_id: str | None):
        toml, msg = picked_config(ctx.store, run_id, ctx.spaces, ws, new_run_workdir(config_path))
        if toml is None:
            return gr.update(), msg
        return gr.update(value=toml, label=f"Config for a new run (TOML; loaded from run {run_id}'s config)"), msg

    def on_create(t: str, request: gr.Request):
        check_writable(ctx, request)
        run_id, msg = create_run_from_text(ctx.store, t, ctx.spaces, ws)
        if run_id:  # this page's run (studio.run_owners): on a Space the page that may start, curate and stop it
            ctx.jobs.owners.record(run_id, session_of(request))
        choices = [r["run_id"] for r in ctx.store.list_runs()]
        return msg, gr.update(choices=choices, value=run_id) if run_id else gr.update()

    def on_start_new(t: str, name: str, request: gr.Request):
        check_writable(ctx, request)
        # Refused before anything is created: a run made for a job that cannot start was an orphan, and the Run
        # picker moved to it on every press. A job that starts between this check and the submit below is still
        # refused there (the created run then waits for a job button).
        busy = ctx.jobs.busy(session_of(request))
        if busy:
            return busy, gr.update()
        run_id, msg = create_run_from_text(ctx.store, t, ctx.spaces, ws)
        if run_id is None:
            return msg, gr.update()
        refused = start_first_iteration(ctx.store, ctx.jobs, run_id, who_of(name, request) or "",
                                        session=session_of(request))
        choices = [r["run_id"] for r in ctx.store.list_runs()]
        note = refused or f"The starting agents' evaluation (iteration 0), then MOAT's first iteration, {RUNNING_NOTE}"
        return with_note(msg, note), gr.update(choices=choices, value=run_id)

    def starter(kind: str):
        def start(run_id: str | None, name: str, request: gr.Request) -> str:
            return start_job(ctx, kind, run_id, name, request)
        return start

    def on_stop(name: str, request: gr.Request) -> str:
        check_writable(ctx, request)
        return ctx.jobs.stop(user=who_of(name, request) or "", session=session_of(request))

    def refresh(run_id: str | None, drawn: list[str] | None, msg: str | None = None):
        # Only what changed since this session last drew it (studio.redraw): an unchanged chart or table re-sent
        # every 2 s was drawn again by the browser each time, on every open page.
        snap = ctx.jobs.snapshot()
        live = bool(snap["running"] and snap.get("run_id") == run_id)
        logs = ctx.store.train_log_rows(run_id) if run_id else None
        pace = poll_seconds(ctx.jobs, RUN_TAB_BUSY_S)
        outputs, signatures = only_changed(drawn, [
            computed(pipeline_html(ctx.store, run_id, snap, live)), computed(job_markdown(ctx.jobs)),
            computed(stage_table(ctx.store, run_id, live)),
            (signature((run_id, logs)), lambda: loss_figure(ctx.store, run_id, logs)),
            (signature(("pace", pace)), lambda: gr.Timer(pace)),
            # Built when the run, its config or the message's cautions change, not at every tick (preflight:
            # about a second).
            (signature(("cautions", run_id, bool(msg and CAUTION_HEAD in msg and f"`{run_id}`" in msg),
                        (ctx.store.get_run(run_id) or {}).get("config") if run_id else None)),
             lambda: picked_run_cautions(ctx.store, run_id, msg))])
        # The job's announcement turns into how it ended (the line otherwise said "are running" long after). In the
        # same event as the rest: each event costs the page a pass over every component (studio.pace).
        settled = settled_message(msg, snap)
        return (*outputs, gr.skip() if settled is None else settled, signatures)

    validate_btn.click(on_validate, editor, [verdict, command], api_name="run_validate")
    from_picked.click(on_from_picked, ctx.run, [editor, verdict], api_name="run_config_from_picked")
    editor.change(lambda t: cli_command(config_path, t, ctx.spaces, ws), editor, command, show_progress="hidden",
                  api_name="run_cli_command", api_visibility="undocumented")
    create_btn.click(on_create, editor, [verdict, ctx.run], api_name="run_create")
    # A job started here: the Run tab follows it at the busy pace from the next tick (studio.pace).
    busy = {"fn": lambda: gr.Timer(poll_seconds(ctx.jobs, RUN_TAB_BUSY_S)), "inputs": None, "outputs": timer,
            "show_progress": "hidden", "api_visibility": "undocumented"}
    start_btn.click(on_start_new, [editor, ctx.curator], [message, ctx.run], api_name="run_start_new").then(
        **busy, api_name="run_start_new_pace")
    for kind, btn in buttons.items():
        btn.click(starter(kind), [ctx.run, ctx.curator], message, api_name=f"run_{kind}").then(
            **busy, api_name=f"run_{kind}_pace")
    stop_btn.click(on_stop, ctx.curator, message, api_name="run_stop")
    # One event, in order per session (see studio.app.CONCURRENCY): an older snapshot never lands last.
    drawn = gr.State(None)  # signatures of what this session's Run tab last drew (studio.redraw)
    # The run picker's change through a copy of its own (studio.relay): a tick while a run change's refresh ran made
    # the page fire the picker's change again, and every tab listening to it computed twice.
    gr.on([timer.tick, own_change(ctx.run, "run_refresh_on_run")], refresh, [ctx.run, drawn, message],
          [pipeline, job, stages, loss, timer, cautions, message, drawn],
          show_progress="hidden",
          api_name="run_refresh", api_visibility="undocumented", trigger_mode="always_last")
