"""Run tab: *Start a new run* (create a run from the config and run its first iteration), drive the shared
``JobWorker`` (next stage / rest of iteration / next iteration / stop) and watch it: the iteration as a pipeline of
stage cards with progress bars, ETA and one human line each (``studio.pipeline``, ``studio.stage_text``), the job's
log tail, every stage of the run in a table, TRL loss curves, refreshed by a ``gr.Timer``. Under *Advanced*: edit
the config (TOML) in the page, validate it with field-level errors, see the equivalent CLI command, create a run
without starting it.

A config from the page is checked like a file (``engine.config``), then every path in it must lie inside the
studio's workspace (``engine.workspace``), and on Spaces it must pass ``spaces_policy``. Creating a run and every
job button are write endpoints: ``check_writable`` refuses them server side for ``--read-only`` and viewers. On
Spaces a job button also refuses a run that fails ``spaces_policy`` and a job that would start an iteration past the
``run.iterations`` cap (``start_job``: the server decides, whatever the page sends).

Handlers: ``validate_config``, ``cli_command``, ``create_run_from_text``, ``start_job``, ``stage_table``,
``job_markdown``, ``loss_figure``, ``config_toml``: plain functions of the store / worker / text, called by the
Gradio wiring in ``build``.
"""

from __future__ import annotations

import json
import shlex
import time
import tomllib
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd
import plotly.graph_objects as go

from engine.config import RunConfig, config_from_dict, config_to_dict, config_to_toml, load_config
from engine.errors import ConfigError, DataError
from engine.loop import create_run, run_config, run_loop
from engine.store import Store
from engine.workspace import config_paths_inside
from studio.common import SPACES_CAPS, Ctx, check_writable, spaces_capped, spaces_policy, who_of
from studio.jobs import JobWorker
from studio.pipeline import pipeline_html
from studio.plots import note_if_empty
from studio.stage_text import shown_status, stage_seconds, stage_summary

# The stage table's columns, also its headers before the run has any stage.
STAGE_COLUMNS = ["iteration", "stage", "status", "summary", "seconds", "error"]


def validate_config(text: str, spaces: bool = False, workspace: str | Path | None = None) -> tuple[RunConfig | None,
                                                                                                 str]:
    """Parse and validate TOML text: ``(config, "")`` or ``(None, "**field**: message")``. With ``workspace`` every
    path field must resolve inside it; with ``spaces`` the config must pass ``spaces_policy``."""
    try:
        data = tomllib.loads(text or "")
    except tomllib.TOMLDecodeError as exc:
        return None, f"**<toml>**: {exc}"
    try:
        config = config_from_dict(data, "editor")
        if workspace is not None:
            config_paths_inside(config, workspace)
        if spaces:
            config = spaces_policy(config)
    except ConfigError as exc:
        return None, f"**{exc.field}**: {exc.message}"
    return config, ""


def config_toml(config: RunConfig) -> str:
    """The whole config as TOML (``engine.config.config_to_toml``)."""
    return config_to_toml(config)


def _flat(d: dict[str, Any]) -> dict[str, Any]:
    return {f"{s}.{k}": v for s, fields in d.items() for k, v in fields.items()}


def cli_command(config_path: str, text: str, spaces: bool = False, workspace: str | Path | None = None) -> str:
    """``python -m engine run --config FILE --set a.b=v ...`` for the fields the editor changed from the file."""
    config, error = validate_config(text, spaces, workspace)
    if config is None:
        return f"# fix the config first: {error}"
    try:
        base = _flat(config_to_dict(load_config(config_path)))
    except (ConfigError, OSError):
        base = _flat(config_to_dict(RunConfig()))
    sets = []
    for key, value in _flat(config_to_dict(config)).items():
        if base.get(key) != value:
            shown = json.dumps(value) if isinstance(value, list) else str(value).lower() if isinstance(
                value, bool) else str(value)
            sets.append(f"--set {shlex.quote(f'{key}={shown}')}")
    return " ".join(["python -m engine run --config", shlex.quote(config_path), *sets])


def create_run_from_text(store: Store, text: str, spaces: bool = False,
                         workspace: str | Path | None = None) -> tuple[str | None, str]:
    """Validate, then register a run (tasks loaded; nothing trained): ``(run_id, message)``."""
    config, error = validate_config(text, spaces, workspace)
    if config is None:
        return None, f"Not created: {error}"
    try:
        run_id = create_run(store, config)
    except (ConfigError, DataError, OSError) as exc:  # ConfigError: a model path that fails the preflight
        return None, f"Not created: {exc}"
    return run_id, f"Created run `{run_id}` ({store.count('tasks', run_id)} tasks)."


def stage_table(store: Store, run_id: str | None, live: bool = False) -> pd.DataFrame:
    """Every stage of the run; ``live``: this studio's job is running it. Otherwise a stage still marked
    ``running`` was interrupted (a killed process: this studio holds the file, so nobody else can be running it)
    and shows so until a job resumes it."""
    rows = []
    for it in store.iterations(run_id) if run_id else []:
        for stage, s in store.stage_status(run_id, it).items():
            status = shown_status(s["status"], live)
            rows.append({"iteration": it, "stage": stage, "status": status,
                         "summary": stage_summary(store, run_id, it, stage, status, s["counts"]),
                         "seconds": stage_seconds(s), "error": (s["error"] or "")[:160]})
    return pd.DataFrame(rows, columns=STAGE_COLUMNS)


def start_job(ctx: Ctx, kind: str, run_id: str | None, name: str, request: gr.Request | None) -> str:
    """What a job button (``next_stage`` / ``rest_of_iteration`` / ``next_iteration``) does: the write guard, on
    Spaces the policy and the iteration cap, then the job on the shared worker; the line the page shows."""
    check_writable(ctx, request)
    if not run_id:
        return "Pick or create a run first."
    max_iteration = None
    if ctx.spaces and ctx.store.get_run(run_id) is not None:
        try:  # a run put in the store by other means must still pass the Spaces policy
            spaces_policy(run_config(ctx.store, run_id))
        except ConfigError as exc:
            return f"Refused on Spaces: {exc}"
        # The policy checks the config's run.iterations, but each press may start one iteration past it: the
        # worker caps the iterations the job runs.
        max_iteration = dict(SPACES_CAPS)["run.iterations"]
    refused = ctx.jobs.start_loop(kind, run_id, user=who_of(name, request) or "", max_iteration=max_iteration,
                                  where="on Spaces")
    return refused or f"Started `{kind}` on `{run_id}`."


def start_first_iteration(store: Store, jobs: JobWorker, run_id: str, user: str = "") -> str | None:
    """*Start a new run*'s job: the iteration-0 evaluation and then iteration 1, as the first-visit demo run does (a
    "next iteration" job on a fresh run stops after iteration 0, which left a new run with nothing in Pairs or
    Critic). Within the Spaces cap of one iteration. A message when refused."""
    return jobs.submit("start_new", run_id, lambda progress, stop: run_loop(store, run_id, iterations=1,
                                                                            progress=progress, should_stop=stop),
                       user=user)


def job_markdown(jobs: JobWorker) -> str:
    """The worker's job as markdown: state, the latest event per stage (counts, ETA) and the log tail."""
    snap = jobs.snapshot()
    if snap["status"] == "idle":
        return "No job has run in this studio yet."
    took = (snap["finished_at"] or time.time()) - snap["started_at"]
    lines = [f"**Job** `{snap['label']}` on `{snap['run_id']}` — **{snap['status']}**"
             f"{' (stop requested)' if snap['stop_requested'] and snap['running'] else ''} · {took:.0f}s"
             f"{' · by ' + snap['user'] if snap.get('user') else ''}"]
    if snap.get("result") and not snap["running"]:
        lines.append(f"Result: {snap['result']}")
    if snap.get("error"):
        lines.append(f"```\n{snap['error'][-800:]}\n```")
    latest: dict[tuple, dict] = {}
    for e in snap["events"]:
        latest[(e.get("iteration"), e.get("stage"))] = e
    for (it, stage), e in latest.items():
        eta = f", ETA {e['eta_s']:.0f}s" if e.get("eta_s") is not None else ""
        lines.append(f"- iteration {it} · {stage}: {e.get('done')}/{e.get('total')}{eta}")
    tail = [f"{time.strftime('%H:%M:%S', time.localtime(e['time']))} {e.get('stage')} {e.get('done')}/"
            f"{e.get('total')} {e.get('message', '')}" for e in snap["events"][-8:]]
    if tail:
        lines.append("```\n" + "\n".join(tail) + "\n```")
    return "\n\n".join(lines)


def loss_figure(store: Store, run_id: str | None) -> go.Figure:
    """Training loss per logged step for each (iteration, training stage) of the run."""
    fig = go.Figure()
    if run_id:
        logs = store.train_log_rows(run_id)
        logs = logs[logs["loss"].notna()]
        for (it, stage), df in logs.groupby(["iteration", "stage"]):
            fig.add_scatter(x=df["step"], y=df["loss"], mode="lines+markers", name=f"it {it} {stage}")
    fig.update_layout(title="TRL loss", xaxis_title="step", yaxis_title="loss", height=320,
                      margin=dict(l=40, r=10, t=40, b=40))
    return note_if_empty(fig, "No training logged yet: the loss appears here while a training stage runs")


def build(ctx: Ctx, config_path: str) -> None:
    text = Path(config_path).read_text(encoding="utf-8") if Path(config_path).exists() else ""
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
    gr.Markdown("*Start a new run* creates a run from the config under **Advanced** (the demo's by default) and runs "
                "its first iteration; the other buttons continue the run picked above, one stage, the rest of an "
                "iteration or a whole next iteration at a time.")
    message = gr.Markdown(elem_id="run-message")
    pipeline = gr.HTML(elem_id="run-pipeline")
    job = gr.Markdown(job_markdown(ctx.jobs), elem_id="run-job")
    with gr.Row():
        # Headers and an empty frame from the start: without them Gradio draws "1 2 3" until a stage exists.
        stages = gr.Dataframe(stage_table(ctx.store, None), headers=STAGE_COLUMNS, label="Every stage of the run",
                              interactive=False, elem_id="run-stages")
        loss = gr.Plot(label="Loss")
    with gr.Accordion("Advanced: the run's config (TOML)", open=False, elem_id="run-advanced"):
        editor = gr.Code(value=text, label=f"Run config (TOML, from {config_path})", lines=18,
                         elem_id="run-config")
        with gr.Row():
            validate_btn = gr.Button("Validate", elem_id="run-validate")
            create_btn = gr.Button("Create run (without starting it)", interactive=not ctx.read_only,
                                   elem_id="run-create")
        verdict = gr.Markdown(elem_id="run-validation")
        command = gr.Textbox(label="Equivalent CLI command", interactive=False, elem_id="run-cli",
                             value=cli_command(config_path, text, ctx.spaces, ws))
    timer = gr.Timer(2.0)

    def on_validate(t: str) -> tuple[str, str]:
        _, error = validate_config(t, ctx.spaces, ws)
        return (error or "Config is valid."), cli_command(config_path, t, ctx.spaces, ws)

    def on_create(t: str, request: gr.Request):
        check_writable(ctx, request)
        run_id, msg = create_run_from_text(ctx.store, t, ctx.spaces, ws)
        choices = [r["run_id"] for r in ctx.store.list_runs()]
        return msg, gr.update(choices=choices, value=run_id) if run_id else gr.update()

    def on_start_new(t: str, name: str, request: gr.Request):
        check_writable(ctx, request)
        run_id, msg = create_run_from_text(ctx.store, t, ctx.spaces, ws)
        if run_id is None:
            return msg, gr.update()
        refused = start_first_iteration(ctx.store, ctx.jobs, run_id, who_of(name, request) or "")
        choices = [r["run_id"] for r in ctx.store.list_runs()]
        return (f"{msg} {refused}" if refused else f"{msg} The starting agents' evaluation (iteration 0), then MOAT's "
                "first iteration, are running: the pipeline below follows them."), gr.update(choices=choices,
                                                                                              value=run_id)

    def starter(kind: str):
        def start(run_id: str | None, name: str, request: gr.Request) -> str:
            return start_job(ctx, kind, run_id, name, request)
        return start

    def on_stop(request: gr.Request) -> str:
        check_writable(ctx, request)
        return ctx.jobs.stop()

    def refresh(run_id: str | None):
        snap = ctx.jobs.snapshot()
        live = bool(snap["running"] and snap.get("run_id") == run_id)
        return (pipeline_html(ctx.store, run_id, snap, live), job_markdown(ctx.jobs), stage_table(ctx.store, run_id,
                                                                                                   live),
                loss_figure(ctx.store, run_id))

    validate_btn.click(on_validate, editor, [verdict, command], api_name="run_validate")
    editor.change(lambda t: cli_command(config_path, t, ctx.spaces, ws), editor, command, show_progress="hidden",
                  api_name="run_cli_command", api_visibility="undocumented")
    create_btn.click(on_create, editor, [verdict, ctx.run], api_name="run_create")
    start_btn.click(on_start_new, [editor, ctx.curator], [message, ctx.run], api_name="run_start_new")
    for kind, btn in buttons.items():
        btn.click(starter(kind), [ctx.run, ctx.curator], message, api_name=f"run_{kind}")
    stop_btn.click(on_stop, None, message, api_name="run_stop")
    # One event, in order per session (see studio.app.CONCURRENCY): an older snapshot never lands last.
    gr.on([timer.tick, ctx.run.change], refresh, ctx.run, [pipeline, job, stages, loss], show_progress="hidden",
          api_name="run_refresh", api_visibility="undocumented", trigger_mode="always_last")
