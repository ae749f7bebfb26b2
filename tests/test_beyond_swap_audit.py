"""Audit fixes around *Beyond MOAT* and the swap table: a one-set-of-weights run refused by ``swap``, a missing model
directory named before any cell loads (not a hub traceback), GRPO for the planner keeping the tasks its configured
rewards can score, and a missing local path of the hub's ``org/name`` form refused without asking the hub."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from engine import swap
from engine.__main__ import main
from engine.config import RunConfig, config_to_dict, load_config
from engine.errors import CheckpointError
from engine.evaluate import Trace, summarize
from engine.store import Store
from engine.swap import GOLD, SwapError, swap_refusal, swap_table
from engine.tasks import Task


def _evaluated_run(tmp_path: Path, demo_tasks, config: RunConfig, monkeypatch) -> tuple[Store, str, list]:
    """A store holding a run of ``config`` whose iterations 0 and 1 are marked evaluated (no metrics: every cell is
    computed), with ``_compute_cell`` scripted (every task correct) and recording the cells it was asked for."""
    store = Store(tmp_path / "s.duckdb")
    run_id = store.create_run("audit", config_to_dict(config), tmp_path / "runs", demo_tasks)
    for t in (0, 1):
        store.set_stage(run_id, t, "evaluate", "done")
    calls: list[tuple[int, int]] = []

    def compute(ctx, a, b, tasks, toolbox):
        calls.append((a, b))
        tasks = swap.cell_tasks(a, tasks)
        traces = [Trace(t.id, t.split, t.domain, "plan", ["s"], "R1 = x", True, {}, "1", t.answer, True)
                  for t in tasks]
        return summarize(traces), traces

    monkeypatch.setattr(swap, "_compute_cell", compute)
    return store, run_id, calls


# -- 1. one set of weights in both roles: no swap table ---------------------------------------------------------------

SHARED = ["agents.topology=shared", "warm_start.enabled=false", "data.eval_limit=3"]


def test_swap_refuses_a_run_whose_roles_are_one_set_of_weights(tmp_path, demo_tasks, tiny_agents_dir, monkeypatch,
                                                               capsys):
    grounder = str(tiny_agents_dir / "grounder")
    config = load_config(None, [*SHARED, f"planner.path={grounder}", f"grounder.path={grounder}",
                                f"run.workdir={tmp_path / 'runs'}"])
    store, run_id, calls = _evaluated_run(tmp_path, demo_tasks, config, monkeypatch)
    # Before: the table was computed, labelling "P1 G0" stage 1 alone although P1 and G1 are the same weights.
    with pytest.raises(SwapError, match=rf"run {run_id} has no swap table: its planner and grounder are one set of "
                                        r"weights \(agents.topology = \"shared\" without LoRA\)"):
        swap_table(store, run_id)
    assert calls == [] and store.count("swaps", run_id) == 0
    db = str(store.path)
    store.close()
    assert main(["swap", "--db", db, "--run", run_id, "--quiet"]) == 2
    shown = capsys.readouterr()
    assert shown.out == "" and shown.err.startswith(f"error: run {run_id} has no swap table: ")
    assert "stage 1's planner cannot be swapped apart from stage 2's grounder" in shown.err
    assert shown.err.count("\n") == 1  # one line, no traceback


def test_a_shared_base_with_lora_or_separate_agents_keeps_its_swap_table(tiny_agents_dir):
    grounder = str(tiny_agents_dir / "grounder")
    lora = load_config(None, [*SHARED, f"planner.path={grounder}", f"grounder.path={grounder}", "dpo.lora=true",
                              "dpo.save_adapter=true", "sft.lora=true", "sft.save_adapter=true"])
    assert swap_refusal(lora) is None  # each role its own adapters: the stages stay apart
    assert swap_refusal(load_config(None, [])) is None


# -- 2. a model directory that is not there: the clean error, before any cell ----------------------------------------

def test_swap_from_another_directory_names_the_missing_model_directory(tmp_path, demo_tasks, monkeypatch, capsys):
    # The default config's agents are relative (assets/demo/...): from tmp_path they are not there.
    config = load_config(None, [f"run.workdir={tmp_path / 'runs'}", "data.eval_limit=3"])
    assert not Path(config.planner.path).is_absolute()
    store, run_id, calls = _evaluated_run(tmp_path, demo_tasks, config, monkeypatch)
    monkeypatch.chdir(tmp_path)
    missing = (rf"planner.path: {config.planner.path}: no such model directory \(evaluate of iteration 0 loads the "
               r"configured planner\)")
    # Before: the cells were computed (with real models: transformers' "Repo id must be in the form ..." traceback).
    with pytest.raises(CheckpointError, match=missing):
        swap_table(store, run_id)
    assert calls == [] and store.count("swaps", run_id) == 0
    db = str(store.path)
    store.close()
    assert main(["swap", "--db", db, "--run", run_id, "--quiet"]) == 2
    shown = capsys.readouterr()
    assert shown.out == "" and shown.err == (f"error: planner.path: {config.planner.path}: no such model directory "
                                             "(evaluate of iteration 0 loads the configured planner)\n")


def test_swap_with_every_agent_there_computes_every_cell(tmp_path, demo_tasks, tiny_agents_dir, monkeypatch):
    """The check refuses nothing that is there: the table is computed as before."""
    config = load_config(None, [f"run.workdir={tmp_path / 'runs'}", "data.eval_limit=3",
                                f"planner.path={tiny_agents_dir / 'planner'}",
                                f"grounder.path={tiny_agents_dir / 'grounder'}"])
    store, run_id, calls = _evaluated_run(tmp_path, demo_tasks, config, monkeypatch)
    table = swap_table(store, run_id, reuse=False)
    assert sorted(calls) == sorted([(0, 0), (1, 0), (GOLD, 0), (1, 1), (0, 1), (GOLD, 1)])
    assert set(table["cells"]) == {"P0G0", "P1G0", "P0G1", "P1G1"}
    store.close()


# -- 3. GRPO for the planner: only the fields the configured rewards read --------------------------------------------

GRPO = ["stages.planner_objective=grpo", "grpo.num_generations=2", "grpo.batch_size=2", "grpo.max_steps=1",
        "grpo.max_completion_length=16", "grpo.bf16=false"]


def _planner_stage(tiny_run, monkeypatch, rewards: str, strip: Callable[[Task], Task]) -> tuple[dict, list[str]]:
    """Run GRPO's planner stage of a tiny run whose train tasks are changed by ``strip``, with training stubbed (the
    rows it would train on are recorded); returns the stage's counts and those rows' task ids."""
    from engine.loop import run_config, run_directory
    from engine.stages import train_grpo
    from engine.stages.context import StageContext

    trained: list[str] = []

    def fake_train(ctx, role, start, rows, settings, book, precision):
        trained.extend(r["task_id"] for r in rows)
        return {"rows": len(rows), "objective": "grpo"}

    monkeypatch.setattr(train_grpo, "_train", fake_train)
    db, run_id = tiny_run(*GRPO, f"grpo.rewards={rewards}")
    with Store(db) as store:
        config = run_config(store, run_id)
        ctx = StageContext(store, run_id, 1, config, run_directory(store, run_id), stage="train_planner")
        ctx.begin(1, "train_planner", None, lambda: False)
        monkeypatch.setattr(ctx, "train_tasks", lambda: [strip(t) for t in StageContext.train_tasks(ctx)])
        counts = train_grpo.run_planner(ctx)
    return counts, trained


def test_grpo_without_the_gap_reward_trains_on_tasks_without_gold_actions(tiny_run, monkeypatch):
    no_actions = lambda t: dataclasses.replace(t, gold_actions=[])  # noqa: E731
    # Before: every task was dropped for lacking gold actions, which neither reward reads: "planner unchanged".
    counts, trained = _planner_stage(tiny_run, monkeypatch, "execution,format", no_actions)
    assert counts["rows"] == 3 == len(trained) and "left_out" not in counts


def test_grpo_with_the_gap_reward_says_it_needs_gold_actions(tiny_run, monkeypatch):
    no_actions = lambda t: dataclasses.replace(t, gold_actions=[])  # noqa: E731
    counts, trained = _planner_stage(tiny_run, monkeypatch, "gap,format", no_actions)
    assert trained == [] and counts["rows"] == 0 and counts["left_out"] == {"gap": 3}
    assert counts["note"] == "3 training task(s) left out: the gap reward needs gold actions, which they lack; " \
                             "planner unchanged"


def test_grpo_leaves_out_tasks_the_execution_reward_cannot_check_and_says_so(tiny_run, monkeypatch):
    unanswered: list[str] = []

    def first_unanswered(task: Task) -> Task:  # the first of the 3 training tasks loses its gold answer
        if unanswered:
            return task
        unanswered.append(task.id)
        return dataclasses.replace(task, answer="")

    counts, trained = _planner_stage(tiny_run, monkeypatch, "execution,format", first_unanswered)
    assert counts["rows"] == len(trained) == 2 and unanswered[0] not in trained
    assert counts["left_out"] == {"execution": 1}
    assert counts["left_out_note"] == "1 training task(s) left out: the execution reward needs a gold answer, which " \
                                      "they lack"
    assert "note" not in counts  # the planner trained: the studio's training line stays


def test_only_the_configured_rewards_decide_which_tasks_train(demo_tasks):
    from engine.stages.train_grpo import scorable_tasks

    task = next(t for t in demo_tasks if t.gold_actions and t.answer)
    bare = dataclasses.replace(task, gold_actions=[], answer="")
    assert scorable_tasks([task, bare], ["format", "overlong"]) == ([task, bare], {})
    assert scorable_tasks([task, bare], ["gap"]) == ([task], {"gap": 1})
    assert scorable_tasks([task, bare], ["gap", "execution", "format"]) == ([task], {"gap": 1, "execution": 1})


# -- 4. a missing local path of the hub's org/name form --------------------------------------------------------------

def test_a_missing_local_path_like_a_hub_id_is_no_model_directory_at_once(tmp_path, monkeypatch):
    from engine.model_paths import missing_model_directory
    from engine.preflight import check_model

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()

    def no_hub(*args, **kwargs):
        raise AssertionError("asked the hub about a local path")

    import transformers

    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", no_hub)
    # Before: "runs/demo-joint" read as the hub model demo-joint of user "runs" (5 retries, then a network error).
    for path in ("runs/demo-joint", "./planner", "../planner", "~/no-such-model-dir-xyz"):
        assert missing_model_directory(path), path
        with pytest.raises(CheckpointError, match=rf"planner.path: {path}: no such model directory\Z"):
            check_model(path, "", "cpu", "planner")
    # A real hub id, with no such folder here, still goes to the hub; an existing directory is never missing.
    assert not missing_model_directory("HuggingFaceTB/SmolLM2-135M")
    assert not missing_model_directory("runs")
    assert missing_model_directory("runs/a/b")  # not of the org/name form: a local path, as before


def test_a_fresh_clone_without_runs_reads_runs_paths_as_local(tmp_path, monkeypatch):
    """A fresh clone has no ``runs/`` folder yet; the presets name agents built there (``runs/demo-joint``), which
    were then asked of the hub as user ``runs``'s model for about 35 s before a network error."""
    from engine.config import RunSection
    from engine.model_paths import DEFAULT_WORKDIR, missing_model_directory

    monkeypatch.chdir(tmp_path)
    assert DEFAULT_WORKDIR == RunSection().workdir
    assert missing_model_directory("runs/demo-joint")
    assert not missing_model_directory("HuggingFaceTB/SmolLM2-135M")


def test_an_experiment_that_asks_a_swap_table_of_a_one_weights_variant_is_refused_when_it_loads(tmp_path,
                                                                                                 tiny_agents_dir):
    """Else ``swap_finished`` raised after every run of the experiment had been trained."""
    from engine.errors import ConfigError
    from engine.experiment import load_experiment

    grounder = str(tiny_agents_dir / "grounder")
    shared = ", ".join(f'"{s}"' for s in [*SHARED, f"planner.path={grounder}", f"grounder.path={grounder}"])
    path = tmp_path / "exp.toml"
    base = Path(__file__).resolve().parents[1] / "examples" / "demo.toml"
    path.write_text(f'[experiment]\nname = "x"\nbase = "{base}"\nseeds = [1]\nswap = ["one"]\n\n'
                    f'[variants.one]\nset = [{shared}]\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"experiment\.swap: one: its planner and grounder are one set of weights"):
        load_experiment(path)


def test_the_studios_swap_button_says_why_before_a_job_starts(tmp_path, demo_tasks, tiny_agents_dir, monkeypatch):
    from studio.jobs import swap_unavailable

    grounder = str(tiny_agents_dir / "grounder")
    config = load_config(None, [*SHARED, f"planner.path={grounder}", f"grounder.path={grounder}",
                                f"run.workdir={tmp_path / 'runs'}"])
    store, run_id, _ = _evaluated_run(tmp_path, demo_tasks, config, monkeypatch)
    assert swap_unavailable(store, run_id).startswith(f"Run `{run_id}`: its planner and grounder are one set")
    store.close()


def test_the_run_tab_shows_which_tasks_grpo_left_out(tmp_path):
    from studio.stage_text import _stage_line

    counts = {"objective": "grpo", "rows": 5, "rollouts": 10, "mean_reward": 0.5, "rewards": ["execution"],
              "left_out_note": "1 training task(s) left out: the execution reward needs a gold answer"}
    with Store(tmp_path / "s.duckdb") as store:
        line = _stage_line(store, "no-run", 1, "train_planner", "done", counts)
    assert line.startswith("GRPO on 5 tasks: 10 rollouts") and line.endswith("; " + counts["left_out_note"])
