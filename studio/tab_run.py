"""Run tab: *Start a new run* (create a run from the config and run its first iteration), drive the shared
``JobWorker`` (next stage / rest of iteration / next iteration / stop) and watch it: the iteration as a pipeline of
stage cards with progress bars, ETA and one human line each (``studio.pipeline``, ``studio.stage_text``), the job's
log tail beside TRL loss curves (one panel per role, each line named by its iteration and objective), every stage of
the run in a full-width table (its summary column wraps), refreshed by a ``gr.Timer`` (every 2 s while a job runs,
10 s otherwise: ``studio.pace``; only what changed since the session last drew it is sent: ``studio.redraw``); the
same refresh turns the line that announced a job, or *Stop*'s, into how the job ended once it has
(``settled_message``). A job button's line says what the job will run (``job_plan``: the stage a *Next stage* job
runs, always), and a job past the run's ``run.iterations`` says that it raises it, as the job does
(``studio.jobs``). Under *Advanced*: the config for a NEW run (the one *Start a new run* and *Create run* use;
``--config``, the demo's by default, or the picked run's config loaded with *Start from the picked run's config*:
``picked_config``, its ``run.workdir`` moved into the workspace when it lay outside, any other path outside named),
edited in the page (``EDITOR_MAX_LINES`` tall, then it scrolls), validated with field-level errors
(``config_problem``: the field once, or a TOML syntax error's line and column; markdown in the page, plain text in
the CLI box), the equivalent CLI command, and *Create run* without starting it. *Validate* also makes the checks
*Create run* makes before writing anything (``check_config``: task files, models; about a second, nothing written).

A config's cautions (``engine.preflight``: it runs, but likely not as meant, e.g. a chat layout its tokenizer does
not use) are shown, not only printed on the server's stderr: each as a bullet naming its field under a warning
(``cautions_markdown``), below *Validate*'s verdict and below the message of a run *Create run* or *Start a new run*
created (there they stay once the job has ended: ``settled_message``); every time, though the server prints each
once per process. A config without cautions adds nothing.

A config from the page is checked like a file (``engine.config``), then every path in it must lie inside the
studio's workspace (``engine.workspace``), and on Spaces it must pass ``spaces_policy``. Creating a run and every
job button are write endpoints: ``check_writable`` refuses them server side for ``--read-only`` and viewers. On
Spaces a job button also refuses a run that fails ``spaces_policy`` and a job that would start an iteration past the
``run.iterations`` cap (``start_job``: the server decides, whatever the page sends).

Handlers: ``config_problem``, ``validate_config``, ``check_config``, ``cautions_markdown``, ``cli_command``,
``create_run_from_text``, ``with_note``, ``start_job``, ``job_plan``, ``stage_table``, ``job_markdown``,
``settled_message``, ``loss_figure``, ``config_toml``, ``picked_config``, ``paths_outside``, ``new_run_workdir``:
plain functions of the store / worker / text, called by the Gradio wiring in ``build``.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
import time
import tomllib
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

from engine.config import RunConfig, config_from_dict, config_to_dict, config_to_toml, load_config
from engine.errors import ConfigError, DataError
from engine.loop import check_new_run, create_run_with_cautions, is_skipped, pending, run_config, run_loop
from engine.schedule import iteration_config
from engine.store import Store
from engine.workspace import PathOutsideWorkspace, config_paths_inside, inside
from studio.common import SPACES_CAPS, Ctx, check_writable, spaces_capped, spaces_policy, who_of
from studio.jobs import JobWorker, loop_stages
from studio.pace import RUN_TAB_BUSY_S, poll_seconds
from studio.pipeline import pipeline_html
from studio.redraw import computed, only_changed, signature
from studio.run_loss import loss_figure as loss_figure  # the Run tab's loss chart, importable from here as before
from studio.stage_text import shown_status, stage_seconds, stage_summary

# The stage table's columns, also its headers before the run has any stage; their widths (the summary, a sentence,
# gets the room and wraps: it was cut off mid-word).
STAGE_COLUMNS = ["iteration", "stage", "status", "summary", "seconds", "error"]
STAGE_WIDTHS = ["10%", "12%", "8%", "52%", "8%", "10%"]
# The line *Start a new run* ends with while its job runs (``settled_message`` replaces it once the job has ended).
RUNNING_NOTE = "are running: the pipeline below follows them."
# The config editor's height in lines: past it the editor scrolls (the whole config, ~250 lines, made the page
# ~6,000 px tall).
EDITOR_MAX_LINES = 30
# How ``job_plan`` begins when a job would run no stage (``start_job`` then starts none).
NOTHING_LEFT = ": nothing is left to run"
# What a config's cautions are shown under (``cautions_markdown``).
CAUTION_HEAD = "**⚠ Warning:** this config runs, but likely not as meant:"
_TOML_AT = re.compile(r"\s*\(at (?:line (\d+), column (\d+)|end of document)\)\s*$")


def _toml_problem(exc: tomllib.TOMLDecodeError) -> tuple[str, str]:
    """A TOML syntax error as ``("TOML syntax, line 76, column 7", "Expected ']' ...")``: where, then what."""
    text = str(getattr(exc, "msg", None) or exc)
    found = _TOML_AT.search(str(exc))
    line, column = getattr(exc, "lineno", None), getattr(exc, "colno", None)
    if found and line is None:
        line, column = found.group(1), found.group(2)
    text = _TOML_AT.sub("", text)
    where = f"TOML syntax, line {line}, column {column}" if line else "TOML syntax, at the end of the config"
    return where, text


def config_problem(text: str, spaces: bool = False,
                   workspace: str | Path | None = None) -> tuple[RunConfig | None, tuple[str, str] | None]:
    """Parse and validate TOML text: ``(config, None)`` or ``(None, (where, message))``, where is the field
    (``sample.k``) or a TOML syntax error's line and column, named once (a message that starts with its field, as a
    workspace refusal does, loses that copy). With ``workspace`` every path field must resolve inside it; with
    ``spaces`` the config must pass ``spaces_policy``."""
    try:
        data = tomllib.loads(text or "")
    except tomllib.TOMLDecodeError as exc:
        return None, _toml_problem(exc)
    try:
        config = config_from_dict(data, "editor")
        if workspace is not None:
            config_paths_inside(config, workspace)
        if spaces:
            config = spaces_policy(config)
    except ConfigError as exc:
        return None, _field_problem(exc)
    return config, None


def _field_problem(exc: ConfigError) -> tuple[str, str]:
    message = str(exc.message)
    for sep in (": ", " "):
        if exc.field and message.startswith(exc.field + sep):
            return exc.field, message[len(exc.field) + len(sep):]
    return exc.field, message


def problem_markdown(problem: tuple[str, str]) -> str:
    """``**where**: message`` for the page; a ``<`` is escaped (markdown drops ``<tokenizer>`` as a tag)."""
    return f"**{problem[0].replace('<', '&lt;')}**: {problem[1].replace('<', '&lt;')}"


def problem_text(problem: tuple[str, str]) -> str:
    """``where: message`` for a plain-text box (no markdown)."""
    return f"{problem[0]}: {problem[1]}"


def validate_config(text: str, spaces: bool = False, workspace: str | Path | None = None) -> tuple[RunConfig | None,
                                                                                                 str]:
    """``config_problem`` for the page: ``(config, "")`` or ``(None, "**where**: message")`` (markdown)."""
    config, problem = config_problem(text, spaces, workspace)
    return config, problem_markdown(problem) if problem else ""


def cautions_markdown(cautions: list[str]) -> str:
    """The cautions (``engine.preflight``) as a markdown block to end a message with: ``""`` for none, else a blank
    line, ``CAUTION_HEAD`` and a bullet each, its field in bold (the caution up to its first ``": "``, e.g.
    ``planner.chat_template = "lumos"``). A ``<`` is escaped: markdown drops ``<|user|>`` as a tag."""
    if not cautions:
        return ""
    bullets = []
    for caution in cautions:
        field, sep, rest = caution.partition(": ")
        bullets.append(f"- **{_escaped(field)}**: {_escaped(rest)}" if sep else f"- {_escaped(caution)}")
    return "\n\n" + CAUTION_HEAD + "\n\n" + "\n".join(bullets)


def _escaped(text: str) -> str:
    return text.replace("<", "&lt;")


def _refusal(exc: ConfigError | DataError | OSError) -> str:
    """A check that failed, for the page: a field-named error as ``problem_markdown``, a data file's as it says."""
    return problem_markdown(_field_problem(exc)) if isinstance(exc, ConfigError) else str(exc)


def check_config(text: str, spaces: bool = False, workspace: str | Path | None = None, deep: bool = True) -> str:
    """*Validate*'s verdict (markdown): ``validate_config``, then what *Create run* checks before it writes anything
    (``engine.loop.check_new_run``: the task files, the evaluated splits, the models' preflight; nothing written).
    ``"Config is valid."`` followed by the cautions (``cautions_markdown``), or the first problem. ``deep=False``
    (a read-only studio, a viewer: who cannot create the run) stops after ``validate_config``: the model checks may
    read a hub id's config over the network and take a worker for seconds."""
    config, error = validate_config(text, spaces, workspace)
    if config is None:
        return error
    if not deep:
        return "Config is valid (fields; the task files and models are checked by *Create run*)."
    try:
        _, cautions = check_new_run(config)
    except (ConfigError, DataError, OSError) as exc:  # a model or task file that fails the checks
        return _refusal(exc)
    return "Config is valid." + cautions_markdown(cautions)


def config_toml(config: RunConfig) -> str:
    """The whole config as TOML (``engine.config.config_to_toml``)."""
    return config_to_toml(config)


def _flat(d: dict[str, Any]) -> dict[str, Any]:
    return {f"{s}.{k}": v for s, fields in d.items() for k, v in fields.items()}


def cli_command(config_path: str, text: str, spaces: bool = False, workspace: str | Path | None = None) -> str:
    """``python -m engine run --config FILE --set a.b=v ...`` for the fields the editor changed from the file; a
    config that does not validate gives one plain-text line naming the problem (the box shows no markdown)."""
    config, problem = config_problem(text, spaces, workspace)
    if config is None:
        return f"# fix the config first: {problem_text(problem)}"
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
    """Validate, then register a run (tasks loaded; nothing trained): ``(run_id, message)``. The message is one line,
    followed by the config's cautions when it has any (``cautions_markdown``; all of them, however often the server
    met them before: ``engine.loop.create_run_with_cautions``)."""
    config, error = validate_config(text, spaces, workspace)
    if config is None:
        return None, f"Not created: {error}"
    try:
        run_id, cautions = create_run_with_cautions(store, config)
    except (ConfigError, DataError, OSError) as exc:  # a task file or model path that fails the preflight
        return None, f"Not created: {_refusal(exc)}"
    return run_id, f"Created run `{run_id}` ({store.count('tasks', run_id)} tasks).{cautions_markdown(cautions)}"


def with_note(message: str, note: str) -> str:
    """``message`` (``create_run_from_text``'s) with ``note`` added to its first line, above any cautions: *Start a
    new run* says what its job does right after "Created run ...", the warnings stay last."""
    line, sep, cautions = message.partition("\n\n")
    return f"{line} {note}{sep}{cautions}"


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
    # Described before the job starts: once it runs, the store (and run.iterations) moves under the description.
    plan = job_plan(ctx.store, run_id, kind) if ctx.store.get_run(run_id) is not None else ""
    if plan.startswith(NOTHING_LEFT):  # no job to start: say so rather than announce one that does nothing
        if max_iteration is not None:  # Spaces: no further iteration to point at
            plan = plan.replace(" *Next iteration* starts another.", "")
        return f"Nothing started: `{kind}` on `{run_id}` would run nothing{plan.removeprefix(NOTHING_LEFT)}"
    refused = ctx.jobs.start_loop(kind, run_id, user=who_of(name, request) or "", max_iteration=max_iteration,
                                  where="on Spaces")
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
            what += f", which this run skips ({_escaped(skipped)}): the job records it skipped"
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


def settled_message(message: str | None, snap: dict[str, Any]) -> str | None:
    """The Run tab's message once the job it announced has ended (``None``: leave it as it is). A job button says
    "Started `kind` on `run`..." (``job_plan``), *Stop* "Stop requested: the job `kind` on `run` stops after ..." and
    *Start a new run* "... are running: the pipeline below follows them."; once the worker's job (``snap``,
    ``JobWorker.snapshot``) is that job and no longer runs, the line says how it ended instead, the created run's
    cautions (``cautions_markdown``) still below it. Any other message (a refusal, a created run, a newer job's)
    stays."""
    if not message or snap.get("running") or snap.get("status") in (None, "idle"):
        return None
    run, label = snap.get("run_id"), snap.get("label")
    if message.startswith(f"Started `{label}` on `{run}`") or message.startswith(
            f"Stop requested: the job `{label}` on `{run}`"):  # the stop line said "stops after the batch" for good
        head, cautions = "", ""
    elif label == "start_new" and RUNNING_NOTE in message and f"`{run}`" in message:
        head = message.split(" The starting agents'")[0].rstrip() + " "
        cautions = message.partition(RUNNING_NOTE)[2]  # with_note put them after the note
    else:
        return None
    took = (snap.get("finished_at") or time.time()) - (snap.get("started_at") or time.time())
    status, result = snap.get("status"), snap.get("result")
    ended = {"failed": "failed (the error is below)", "stopped": "was stopped"}.get(
        status, "finished" if result in (None, "done", "paused") else f"ended: {result}")  # paused: its stages ran
    return f"{head}The job `{label}` on `{run}` {ended} after {took:.0f} s.{cautions}"


def new_run_workdir(config_path: str | Path | None) -> str:
    """The ``run.workdir`` a new run from the studio's ``--config`` file gets (the demo's ``runs``); ``RunConfig``'s
    default when that file does not load."""
    try:
        return load_config(config_path).run.workdir if config_path else RunConfig().run.workdir
    except (ConfigError, OSError):
        return RunConfig().run.workdir


_SOURCE_FIELD = re.compile(r"data\.sources\[(\d+)\]\.(path|ground)$")


def _path_field(config: RunConfig, dotted: str, blank: bool = False) -> str:
    """The value of path field ``dotted`` (``planner.path``, ``data.sources[2].ground``); ``blank``: set it to ""."""
    found = _SOURCE_FIELD.match(dotted)
    owner, name = ((config.data.sources[int(found.group(1)) - 1], found.group(2)) if found else
                   (getattr(config, dotted.split(".")[0]), dotted.split(".")[1]))
    value = str(getattr(owner, name) or "")
    if blank:
        setattr(owner, name, "")
    return value


def paths_outside(config: RunConfig, workspace: str | Path) -> list[tuple[str, str]]:
    """``(field, value)`` of every path field of ``config`` outside ``workspace``, in the order
    ``engine.workspace.config_paths_inside`` checks them (its rules, not a copy of them: it names the first one, and
    each is blanked on a copy until it names none)."""
    probe, found = copy.deepcopy(config), []
    while True:
        try:
            config_paths_inside(probe, workspace)
            return found
        except ConfigError as exc:
            if not exc.field or any(exc.field == field for field, _ in found):
                return found  # not a path field it can name twice: stop rather than loop
            found.append((exc.field, _path_field(probe, exc.field, blank=True)))


def picked_config(store: Store, run_id: str | None, spaces: bool = False, workspace: str | Path | None = None,
                  default_workdir: str | None = None) -> tuple[str | None, str]:
    """*Start from the picked run's config*: ``(toml, message)`` to load into the new-run editor (``toml`` None:
    nothing to load, the message says why). A read: the editor is the page's, nothing is stored. Not on Spaces,
    where a new run starts from the demo's config (and a stored config may name server paths).

    With ``workspace``: a ``run.workdir`` outside it (a store made by the CLI with another workdir) is replaced by
    ``default_workdir`` (``new_run_workdir``: where a new run from the studio's config goes; RunConfig's default when
    None) when that lies inside, and the message says so; every other path field outside it (models, task files) is
    left as it is and named in the message: *Validate* and *Create run* refuse it until it points inside."""
    if spaces:
        return None, "On this Space a new run starts from the demo's config."
    if not run_id or store.get_run(run_id) is None:
        return None, "Pick a run first."
    try:
        config = run_config(store, run_id)
    except ConfigError as exc:
        return None, f"The config of `{run_id}` no longer validates: {problem_markdown(_field_problem(exc))}"
    notes = []
    if workspace is not None:
        root, outside = Path(workspace).resolve(), paths_outside(config, workspace)
        workdir = default_workdir or RunConfig().run.workdir
        if "run.workdir" in dict(outside) and _is_inside(workspace, workdir):  # else it is named below, as is
            notes.append(f"Its **run.workdir** `{config.run.workdir}` lies outside the studio's workspace `{root}`: "
                         f"replaced by `{workdir}`, a new run's from the studio's config.")
            config.run.workdir = workdir
            outside = [(field, value) for field, value in outside if field != "run.workdir"]
        if outside:
            named = ", ".join(f"**{field}** (`{value}`)" for field, value in outside)
            notes.append(f"Outside the workspace `{root}`, so *Validate* and *Create run* refuse them until they "
                         f"point inside it: {named}.")
    return config_toml(config), " ".join([
        f"Loaded the config of `{run_id}` as the start of a **new** run: *Start a new run* or *Create run* makes a "
        "new run from it (the picked run is not changed).", *notes])


def _is_inside(workspace: str | Path, path: str) -> bool:
    try:
        inside(workspace, path)
    except PathOutsideWorkspace:
        return False
    return True


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
    gr.Markdown("*Start a new run* creates a run from the config for a new run under **Advanced** (the demo's by "
                "default, or the picked run's once loaded there) and runs its first iteration; the other buttons "
                "continue the run picked above, one stage, the rest of an iteration or a whole next iteration at a "
                "time.")
    message = gr.Markdown(elem_id="run-message")
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
        choices = [r["run_id"] for r in ctx.store.list_runs()]
        return msg, gr.update(choices=choices, value=run_id) if run_id else gr.update()

    def on_start_new(t: str, name: str, request: gr.Request):
        check_writable(ctx, request)
        run_id, msg = create_run_from_text(ctx.store, t, ctx.spaces, ws)
        if run_id is None:
            return msg, gr.update()
        refused = start_first_iteration(ctx.store, ctx.jobs, run_id, who_of(name, request) or "")
        choices = [r["run_id"] for r in ctx.store.list_runs()]
        note = refused or f"The starting agents' evaluation (iteration 0), then MOAT's first iteration, {RUNNING_NOTE}"
        return with_note(msg, note), gr.update(choices=choices, value=run_id)

    def starter(kind: str):
        def start(run_id: str | None, name: str, request: gr.Request) -> str:
            return start_job(ctx, kind, run_id, name, request)
        return start

    def on_stop(request: gr.Request) -> str:
        check_writable(ctx, request)
        return ctx.jobs.stop()

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
            (signature(("pace", pace)), lambda: gr.Timer(pace))])
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
    stop_btn.click(on_stop, None, message, api_name="run_stop")
    # One event, in order per session (see studio.app.CONCURRENCY): an older snapshot never lands last.
    drawn = gr.State(None)  # signatures of what this session's Run tab last drew (studio.redraw)
    gr.on([timer.tick, ctx.run.change], refresh, [ctx.run, drawn, message],
          [pipeline, job, stages, loss, timer, message, drawn],
          show_progress="hidden",
          api_name="run_refresh", api_visibility="undocumented", trigger_mode="always_last")
