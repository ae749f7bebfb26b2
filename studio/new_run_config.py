"""The Run tab's config for a NEW run, as plain functions of the text, the store and the workspace (the Gradio
wiring is ``studio.tab_run.build``): parse and validate the editor's TOML with field-level errors (``config_problem``:
the field once, or a TOML syntax error's line and column; ``validate_config``, ``problem_markdown`` for the page,
``problem_text`` for the plain-text CLI box), *Validate*'s verdict (``check_config``: also the checks *Create run*
makes before writing anything, ``engine.loop.check_new_run``: task files, models; about a second, nothing written),
the equivalent CLI command (``cli_command``; a config as TOML: ``config_toml``), *Create run*
(``create_run_from_text``) and *Start from the picked run's config* (``picked_config``: its ``run.workdir`` moved
into the workspace when it lay outside, any other path outside named; ``paths_outside``, ``new_run_workdir``).

A config from the page is checked like a file (``engine.config``), then every path in it must lie inside the
studio's workspace (``engine.workspace``), and on Spaces it must pass ``spaces_policy`` (its choices, such as the
critic's backend, are checked first, on the TOML itself: ``spaces_choices``). On Spaces *Create run* also refuses a
new run once the store holds ``MAX_SPACES_RUNS`` (``spaces_runs_full``). The created line says what the run uses of
its tasks (``tasks_used``: per iteration's training, and in each evaluation), not only how many its data holds.

A config's cautions (``engine.preflight``: it runs, but likely not as meant, e.g. a chat layout its tokenizer does
not use) are shown, not only printed on the server's stderr: each as a bullet naming its field under
``CAUTION_HEAD`` (``cautions_markdown``), below *Validate*'s verdict and below the message of a run *Create run* or
*Start a new run* created (``with_note`` puts a job's note above them; ``studio.run_cautions`` keeps the created
run's for the Run tab's box); every time, though the server prints each once per process. A config without
cautions adds nothing. Text from a config or a caution is shown as typed (``studio.render.md_escaped``).
"""

from __future__ import annotations

import copy
import json
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

from engine.config import RunConfig, config_from_dict, config_to_dict, config_to_toml, load_config
from engine.config_lines import toml_line
from engine.errors import ConfigError, DataError
from engine.loop import check_new_run, create_run_with_cautions, run_config
from engine.store import Store
from engine.workspace import PathOutsideWorkspace, config_paths_inside, inside
from studio.render import md_escaped
from studio.run_cautions import remember
from studio.spaces_policy import spaces_choices, spaces_policy, spaces_runs_full

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
        if spaces:  # a choice Spaces refuses is said before the config's checks ask for what that choice needs
            spaces_choices(data)
        config = config_from_dict(data, "editor")
        if workspace is not None:
            config_paths_inside(config, workspace)
        if spaces:
            config = spaces_policy(config)
    except ConfigError as exc:
        return None, _field_problem(exc, text)
    return config, None


def _field_problem(exc: ConfigError, text: str = "") -> tuple[str, str]:
    """``(where, message)``: where is the field, and the editor's line of it when one line holds it
    (``sample.k, line 36``, as a TOML syntax error names its line): a long config in a browser text box has no other
    way to find ``data.sources[3].path``."""
    message = str(exc.message)
    for sep in (": ", " "):
        if exc.field and message.startswith(exc.field + sep):
            message = message[len(exc.field) + len(sep):]
            break
    line = toml_line(text, exc.field) if text and exc.field else None
    return (f"{exc.field}, line {line}" if line else exc.field), message


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
    ``planner.chat_template = "lumos"``). Each is shown as typed (``md_escaped``): markdown dropped ``<|user|>`` as
    a tag, and a ``*`` or ``_`` in a path or a template turned into emphasis. A caution is one line (the server prints
    each as one ``warning:`` line), so flattening its blanks loses nothing."""
    if not cautions:
        return ""
    bullets = []
    for caution in cautions:
        field, sep, rest = caution.partition(": ")
        bullets.append(f"- **{md_escaped(field)}**: {md_escaped(rest)}" if sep else f"- {md_escaped(caution)}")
    return "\n\n" + CAUTION_HEAD + "\n\n" + "\n".join(bullets)


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
    met them before: ``engine.loop.create_run_with_cautions``). The cautions are kept for the run
    (``studio.run_cautions.remember``): the Run tab's box reads them from there rather than check the config again.
    On Spaces a store that holds ``MAX_SPACES_RUNS`` runs takes no more (``spaces_runs_full``)."""
    if spaces and (full := spaces_runs_full(len(store.list_runs()))):
        return None, f"Not created: {full}"
    config, error = validate_config(text, spaces, workspace)
    if config is None:
        return None, f"Not created: {error}"
    try:
        run_id, cautions = create_run_with_cautions(store, config)
    except (ConfigError, DataError, OSError) as exc:  # a task file or model path that fails the preflight
        return None, f"Not created: {_refusal(exc)}"
    remember(store, run_id, cautions)  # the Run tab's next refresh shows them without a second preflight
    total, train, evaluated = tasks_used(store, run_id, config)
    return run_id, (f"Created run `{run_id}` ({total} tasks in its data; each iteration trains on {train}, "
                    f"evaluation uses {evaluated}).{cautions_markdown(cautions)}")


def tasks_used(store: Store, run_id: str, config: RunConfig) -> tuple[int, int, int]:
    """``(in its data, trained on per iteration, evaluated)``: the run's stored tasks, how many of its train split
    each iteration trains on (``data.train_limit``, 0: all) and how many the evaluation scores (``data.eval_limit``
    per split of ``evaluate.splits``, 0: all). The engine draws them with ``engine.runtime.sample_tasks`` (through
    ``StageContext.train_tasks`` and ``pick_eval_tasks``), which keeps ``limit`` of a split's tasks, or all of them
    when the limit is 0 or larger; its rule is applied to counts here, as the welcome asks on every page load and
    reading the tasks takes most of a second."""

    def kept(limit: int, split: str) -> int:
        available = store.count("tasks", run_id, split=split)
        return min(limit, available) if limit else available

    evaluated = sum(kept(config.data.eval_limit, split) for split in config.evaluate.splits)
    return store.count("tasks", run_id), kept(config.data.train_limit, "train"), evaluated


def with_note(message: str, note: str) -> str:
    """``message`` (``create_run_from_text``'s) with ``note`` added to its first line, above any cautions: *Start a
    new run* says what its job does right after "Created run ...", the warnings stay last."""
    line, sep, cautions = message.partition("\n\n")
    return f"{line} {note}{sep}{cautions}"


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
