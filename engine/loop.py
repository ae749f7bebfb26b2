"""The MOAT loop: runs, iterations and stages, resumable from what the store holds.

An iteration t >= 1 runs ``STAGES`` in order; iteration 0 evaluates the starting agents, after training them by SFT
when ``warm_start.enabled`` (``WARM_START``). Each stage is a
function ``run(ctx) -> counts`` (``engine.stages``) whose state lives in the store's ``stages`` table:
pending -> running -> done | failed | stopped | skipped. ``run_loop`` runs every stage that is not done or skipped,
so an interrupted run resumes where it stopped, and a stage left ``running`` by a killed process runs again (its
committed batches are kept; a training stage discards its partial output and trains again); ``run_stage`` runs one.
``create_run`` and ``run_loop`` first run ``engine.preflight`` on the config, so a bad task file or model path fails
before any stage writes anything; ``create_run_with_cautions`` also returns the config's cautions (the studio shows
them), and ``check_new_run`` makes create's checks alone (the studio's *Validate*); ``stored_run_cautions`` gives a
stored run's cautions again.
``should_stop`` is polled between batches and after every optimizer step; ``progress`` receives events
``{run_id, iteration, stage, done, total, eta_s, ...}``.
A run goes to its config's ``run.iterations`` unless ``run_loop`` is given ``iterations``; an explicit target (the
CLI's ``run --iterations N``) is recorded with ``record_iterations`` (``set_iterations``: the store's snapshot and
the run directory's config.toml), so a later resume without it goes as far. The studio's jobs pass per-call targets
and record one only when it goes past ``run.iterations`` (``studio.jobs.loop_job``); an experiment raises its runs'
``run.iterations`` to its own N, never lowers it (``extend_iterations``).
"""

from __future__ import annotations

import shlex
import shutil
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.config import ITERATION_STAGES, RunConfig, config_to_dict, config_to_toml
from engine.config_checks import check_launch_files
from engine.errors import ConfigError, DataError, StageStopped, UnknownRun, mark_stage_failed
from engine.preflight import check_stage_agents, preflight
from engine.runtime import check_eval_splits, load_run_tasks
from engine.schedule import critique_skip_reason, iteration_config, phase_of, skip_reason
from engine.stages import critique, evaluation, ground, pairs, sample, score, train, train_grpo, warm_start
from engine.stages.context import ProgressSink, StageContext, crash_point, one_set_of_weights
from engine.store import Store
from engine.stored_config import stored_config
from engine.threads import adapt_to_load

if TYPE_CHECKING:
    from engine.tasks import Task

STAGES: dict[str, Callable[[StageContext], dict[str, Any]]] = {
    "sample": sample.run,
    "score": score.run,
    "pairs": pairs.run,
    "train_planner": lambda ctx: (train_grpo.run_planner if ctx.config.stages.planner_objective == "grpo"
                                  else train.run_planner)(ctx),
    "ground": ground.run,
    "critique": critique.run,
    "train_grounder": lambda ctx: (train_grpo.run_grounder if ctx.config.stages.grounder_objective == "grpo"
                                   else train.run_grounder)(ctx),
    "evaluate": evaluation.run,
}
# Iteration 0 with warm_start.enabled: SFT of the configured models before the starting agents are evaluated.
WARM_START = {"warm_start_planner": warm_start.run_planner, "warm_start_grounder": warm_start.run_grounder}
assert tuple(STAGES) == ITERATION_STAGES  # a phase's stage list is checked against the config's copy
STAGE1 = ("pairs", "train_planner")
STAGE2 = ("ground", "critique", "train_grounder")


def create_run(store: Store, config: RunConfig) -> str:
    """Register a run: its config snapshot, its run directory, and the tasks it will use.

    The task file and the models are checked first (``engine.preflight``): a bad one raises before anything is
    written, so a failed create leaves no run behind. Its cautions (a config that runs, but likely not as meant: a
    prompt layout, a formulation) go to stderr now, while the config can still change; a caller that shows them
    itself (the studio) uses ``create_run_with_cautions``.
    """
    return create_run_with_cautions(store, config)[0]


def create_run_with_cautions(store: Store, config: RunConfig) -> tuple[str, list[str]]:
    """``create_run``, returning ``(run_id, cautions)``: every caution of this config, however often this process
    printed it before (only the stderr line is once per process), so a page can show the run it just created."""
    tasks, cautions = check_new_run(config)
    run_dir = Path(config.run.workdir)
    claimed: list[Path] = []

    def claim(run_id: str) -> bool:
        """Make the run's directory, or pass the id over when it exists: two stores (the studio's and a CLI run on
        another ``--db``) starting a run of one name in one minute in one workdir both took ``<name>-<minute>``, and
        the second overwrote the first's config.toml, then its checkpoints. ``mkdir`` is atomic across processes."""
        directory = run_dir / run_id
        if directory in claimed:  # a transaction retried after a conflict asks again: still ours
            return True
        try:
            directory.mkdir(parents=True)
        except FileExistsError:
            return False
        claimed.append(directory)
        return True

    try:
        run_id = store.create_run(config.run.name, config_to_dict(config), run_dir, tasks, claim=claim)
    except BaseException:
        for directory in claimed:  # nothing registered: the directories this attempt made go too
            shutil.rmtree(directory, ignore_errors=True)
        raise
    for directory in claimed:  # a retried transaction claims again: only the id it registered keeps its directory
        if directory.name != run_id:
            shutil.rmtree(directory, ignore_errors=True)
    write_run_config(run_directory(store, run_id), config)
    return run_id, cautions


def check_new_run(config: RunConfig) -> tuple[list[Task], list[str]]:
    """What ``create_run`` checks before it writes anything, writing nothing: the run's tasks (a bad file raises its
    ``DataError``), that every evaluated split has tasks, an accelerate launch's files
    (``config_checks.check_launch_files``) and ``engine.preflight`` (a model that cannot be used raises
    ``CheckpointError``). Returns the tasks and the cautions (also printed on stderr, once per process)."""
    if not config.run.workdir.strip():  # a new run only: a stored one keeps the directory it was made in
        raise ConfigError("run.workdir", "must not be empty (the run's directory would be made in the current "
                                         "directory, among your files)")
    tasks = load_run_tasks(config)
    check_eval_splits(config, tasks)
    check_launch_files(config)
    return tasks, preflight(config, tasks, probe_critic=True)


def stored_run_cautions(store: Store, run_id: str) -> list[str]:
    """The cautions of a stored run's config (``engine.preflight`` on it and on the run's tasks as the store holds
    them), as ``create_run_with_cautions`` gave them when the run was created, unless ``run.iterations`` or a model
    has changed since: a page reloaded after *Create run* shows them again. ``[]`` when the config or a model no
    longer passes the checks: a resume raises that itself, naming the field."""
    try:
        return preflight(run_config(store, run_id), store.get_tasks(run_id))
    except (ConfigError, DataError, OSError):
        return []


def write_run_config(directory: Path, config: RunConfig) -> Path:
    """``config.toml`` in the run directory, beside its checkpoints: the directory describes itself without the store
    (``python -m engine run --config DIR/config.toml`` starts the same run again). Written whole or not at all."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / "config.toml"
    partial = directory / "config.toml.partial"
    partial.write_text(config_to_toml(config), encoding="utf-8")
    partial.replace(target)
    return target


def set_iterations(store: Store, run_id: str, iterations: int) -> RunConfig:
    """Make ``iterations`` (1 or more) the run's ``run.iterations``: in the store's config snapshot and in the run
    directory's config.toml (rewritten even when the store already agrees: a kill between the two is repaired);
    returns the run's config. Nothing else of a run's config changes after it is created."""
    if iterations < 1:
        raise ValueError(f"run.iterations must be >= 1, got {iterations}")
    run = store.get_run(run_id)
    if run is None:
        raise UnknownRun(store.unknown_run(run_id))
    snapshot = run["config"]
    if snapshot.get("run", {}).get("iterations") != iterations:  # the snapshot otherwise stays as it was stored
        snapshot.setdefault("run", {})["iterations"] = iterations
        store.set_run_config(run_id, snapshot)
    config = stored_config(snapshot)
    write_run_config(run_directory(store, run_id), config)
    return config


def extend_iterations(store: Store, run_id: str, iterations: int) -> None:
    """Raise the run's ``run.iterations`` to ``iterations`` when it records fewer (``set_iterations``); never lower
    it. An experiment run again with a larger ``--iterations`` extends its runs this way, so each run's own record
    (store, config.toml, the studio) says how far it goes."""
    run = store.get_run(run_id)
    if run is None:
        raise UnknownRun(store.unknown_run(run_id))
    if iterations > int(run["config"].get("run", {}).get("iterations") or 0):
        set_iterations(store, run_id, iterations)


def run_config(store: Store, run_id: str) -> RunConfig:
    run = store.get_run(run_id)
    if run is None:
        raise UnknownRun(store.unknown_run(run_id))
    return stored_config(run["config"])


def run_directory(store: Store, run_id: str) -> Path:
    return Path(store.get_run(run_id)["run_dir"]) / run_id


def stages_of(iteration: int, config: RunConfig) -> list[str]:
    if iteration == 0:
        return ([*WARM_START] if config.warm_start.enabled else []) + (
            ["evaluate"] if config.stages.evaluate_initial else [])
    return list(STAGES)


def is_skipped(stage: str, config: RunConfig, iteration: int = 1) -> str | None:
    """Why an ablation, or the curriculum's phase for ``iteration``, skips ``stage`` (None: it runs)."""
    if iteration >= 1 and stage in STAGES and (reason := skip_reason(config, iteration, stage)):
        return reason
    if stage in STAGE1 and not config.stages.stage1:
        return "stage 1 disabled (stages.stage1 = false)"
    if stage in STAGE2 and not config.stages.stage2:
        return "stage 2 disabled (stages.stage2 = false)"
    if stage == "critique" and (reason := critique_skip_reason(config)):  # one rule with schedule.critiques
        return reason
    return None


def run_stage(store: Store, run_id: str, iteration: int, stage: str, *, config: RunConfig | None = None,
              progress: ProgressSink | None = None, should_stop: Callable[[], bool] = lambda: False,
              context: StageContext | None = None) -> str:
    """Run one stage and record its state; returns the final status."""
    if stage not in STAGES and not (stage in WARM_START and iteration == 0):
        raise ValueError(f"unknown stage {stage!r} (stages: {', '.join(STAGES)}; iteration 0 only: "
                         f"{', '.join(WARM_START)})")
    config = iteration_config(config or run_config(store, run_id), iteration)  # with its phase's settings
    ctx = context or StageContext(store, run_id, iteration, config, run_directory(store, run_id))
    ctx.config = config
    ctx.begin(iteration, stage, progress, should_stop)
    phase = phase_of(config, iteration)
    labels = {"phase": phase[1].name} if phase else {}  # a curriculum: each stage's log names its phase
    reason = is_skipped(stage, config, iteration)
    if reason:
        if stage == "train_planner" or stage == "train_grounder":  # the next iteration still needs agents
            role = "planner" if stage == "train_planner" else "grounder"
            store.put_checkpoint(run_id, iteration, role, ctx.agent_path(role, iteration), "unchanged")
        store.set_stage(run_id, iteration, stage, "skipped", counts={"note": reason, **labels})
        return "skipped"
    # A model directory deleted since it was recorded is refused before the stage is marked running: bad input
    # (CheckpointError), not a failed stage, so restoring it and resuming just works. Every caller is covered: step,
    # run_loop (CLI runs, experiments, the studio's jobs) and the benchmarks.
    check_stage_agents(store, run_id, iteration, stage, config)
    store.set_stage(run_id, iteration, stage, "running")
    weights = ctx.agent_path("planner", iteration) if one_set_of_weights(config) else None
    crash_point(iteration, stage, "start")  # test hook: killed before the stage did anything (e.g. between phases)
    try:
        threads = adapt_to_load().describe()  # fewer threads while other processes hold cores
        ctx.announce(f"phase {phase[1].name}; {threads}" if phase else threads)
        counts = {**STAGES, **WARM_START}[stage](ctx)
    except StageStopped as exc:
        store.set_stage(run_id, iteration, stage, "stopped", error=str(exc))
        return "stopped"
    except KeyboardInterrupt:  # a second Ctrl-C (engine.commands._common.ctrl_c_stops): quit now, say so in the store
        _record_quit(store, run_id, iteration, stage)
        raise
    except Exception as exc:
        store.set_stage(run_id, iteration, stage, "failed", error=f"{exc}\n{traceback.format_exc(limit=8)}")
        mark_stage_failed(exc, iteration, stage)
        raise
    if ctx.shared_base is not None:  # agents.topology = shared: the stage's log says what the one model held
        counts = {**counts, "agents": ctx.shared_base.describe()}
    elif weights is not None:
        counts = {**counts, "agents": f"one set of weights in both roles (no LoRA), from {weights}"}
    if stage.startswith("train_"):
        ctx.forget_agents()  # the next stage loads what this one saved
    store.set_stage(run_id, iteration, stage, "done", counts={**counts, **labels})
    return "done"


def _record_quit(store: Store, run_id: str, iteration: int, stage: str) -> None:
    """Record a stage ended mid-batch by Ctrl-C as ``stopped`` (what the user did), not left ``running`` for status
    to call ``interrupted``; its committed batches are kept and a resume redoes the rest, as after a stop. Best
    effort: the interrupt may have landed inside a store transaction, which then refuses the write; the stage reads
    ``interrupted`` then, and resumes the same way."""
    try:
        store.set_stage(run_id, iteration, stage, "stopped", error=f"{stage} quit by a second Ctrl-C mid-batch")
    except Exception:  # noqa: BLE001 -- see above: the state a kill leaves is the fallback, and it is safe
        pass


def pending(store: Store, run_id: str, config: RunConfig, iterations: int) -> list[tuple[int, str]]:
    """``(iteration, stage)`` still to run, in order, for iterations 0..``iterations``."""
    todo = []
    for t in range(0, iterations + 1):
        states = store.stage_status(run_id, t)
        todo += [(t, s) for s in stages_of(t, config) if states.get(s, {}).get("status") not in ("done", "skipped")]
    return todo


# What each stage reads: stages of its own iteration, and the agents (planner, grounder) the previous iteration left
# (iteration 0's warm start when it has one, else the configured models). ``out_of_order`` checks them.
NEEDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "sample": ((), ("planner",)),
    "score": (("sample",), ("grounder",)),
    "pairs": (("score",), ()),
    "train_planner": (("pairs",), ("planner",)),
    "ground": (("sample", "score"), ("grounder",)),
    "critique": (("ground",), ()),
    "train_grounder": (("ground", "critique"), ("grounder",)),
    "evaluate": (("train_planner", "train_grounder"), ()),
}


def out_of_order(store: Store, run_id: str, iteration: int, stage: str, config: RunConfig,
                 db: str | None = None) -> str | None:
    """Why ``stage`` of ``iteration`` cannot run by itself yet (None: it can): an iteration below 0, a stage that
    iteration does not have, or a stage whose data it reads (``NEEDS``) not done or skipped. A stage run early finds
    no inputs, records itself done with no rows, and a later ``run`` skips it: an iteration that trains nothing.
    A done stage may run again (``step critique --critic ...``). The commands it suggests carry ``--db db`` when
    given, so they can be pasted as they are."""
    if iteration < 0:
        return f"iteration must be 0 or more, not {iteration}"
    if stage not in stages_of(iteration, config):
        return (f"iteration {iteration} has no {stage} stage (its stages: "
                f"{', '.join(stages_of(iteration, config)) or 'none'})")
    if iteration == 0:
        own, previous = (tuple(s for s in WARM_START if s in stages_of(0, config)) if stage == "evaluate" else ()), ()
    else:
        own, roles = NEEDS[stage]
        before = stages_of(iteration - 1, config)
        previous = tuple(name for role in roles
                         for name in ((f"warm_start_{role}",) if iteration == 1 else (f"train_{role}",))
                         if name in before)
    where = f" --db {shlex.quote(db)}" if db else ""  # pasted into a shell as it is
    planned = config.run.iterations
    # `run --iterations N` re-targets the run to N iterations: suggested only to extend it, never to shorten it.
    loop = (f"`python -m engine run --run {run_id}{where}` for every pending stage in order (iterations 0-{planned})"
            if iteration <= planned else
            f"`python -m engine run --run {run_id}{where} --iterations {iteration}` to extend the run (it has "
            f"{planned} iteration{'s' if planned != 1 else ''}) and run every stage in order")
    for t, needed in [(iteration, s) for s in own] + [(iteration - 1, s) for s in previous]:
        if store.stage_status(run_id, t).get(needed, {}).get("status") not in ("done", "skipped"):
            return (f"{stage} of iteration {iteration} reads what {needed} of iteration {t} writes, and that is not "
                    f"done yet: run `python -m engine step {needed} --run {run_id}{where} --iteration {t}` first, "
                    f"or {loop}")
    return None


def run_loop(store: Store, run_id: str, *, iterations: int | None = None, progress: ProgressSink | None = None,
             should_stop: Callable[[], bool] = lambda: False, on_stage: Callable[[int, str, str], None] | None = None,
             max_stages: int | None = None, record_iterations: bool = False) -> str:
    """Run every pending stage of iterations 0..N; returns "done", "stopped" or the status that ended it early.

    N is ``iterations``, else the run's ``run.iterations``. ``record_iterations``: an ``iterations`` of 1 or more
    becomes the run's ``run.iterations`` (``set_iterations``) once the preflight passed, before any stage runs, so a
    stopped run resumes to the same N; 0 (iteration 0 only) is never recorded (``run.iterations`` is 1 or more)."""
    config = run_config(store, run_id)
    preflight(config)  # again on resume: a model directory may have moved since the run was created
    check_launch_files(config)  # an accelerate launch's files: else the train stage fails after the sampling
    if record_iterations and iterations is not None and iterations >= 1:
        config = set_iterations(store, run_id, iterations)
    iterations = config.run.iterations if iterations is None else iterations
    ctx = StageContext(store, run_id, 0, config, run_directory(store, run_id))
    for count, (iteration, stage) in enumerate(pending(store, run_id, config, iterations)):
        if max_stages is not None and count >= max_stages:
            return "paused"
        if should_stop():
            return "stopped"
        status = run_stage(store, run_id, iteration, stage, config=config, progress=progress,
                           should_stop=should_stop, context=ctx)
        if on_stage:
            on_stage(iteration, stage, status)
        if status == "stopped":
            return "stopped"
    return "done"
