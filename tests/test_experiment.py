"""Experiments: the file's located errors, the id, the presets; variants x seeds as ordinary runs on the tiny agents
(grouped, resumed after a no-op re-run and after a SIGKILL, extended, run as parallel jobs on their own DuckDB files
and merged); copying a run between store files. The report's numbers are checked in ``test_experiment_report.py``."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine.__main__ import main
from engine.errors import ConfigError
from engine.experiment import load_experiment
from engine.report import experiment_report
from engine.report_markdown import report_markdown
from engine.runner import jobs_dir
from engine.store import Store
from engine.threads import ensure_thread_policy

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "examples" / "demo.toml"


def write_experiment(path: Path, variants: dict[str, list[str]], *, base: str | Path = DEMO, seeds=(11, 12),
                     iterations: int = 1, shared: list[str] = (), extra: str = "") -> Path:
    text = (f"# a test experiment\n[experiment]\nname = \"tiny\"\nbase = {json.dumps(str(base))}\n"
            f"seeds = {json.dumps(list(seeds))}\niterations = {iterations}\nset = {json.dumps(list(shared))}\n{extra}")
    for name, sets in variants.items():
        text += f"\n[variants.{name}]\nset = {json.dumps(sets)}\n"
    path.write_text(text)
    return path


def located(path: Path) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_experiment(path)
    return info.value


# -- the file ---------------------------------------------------------------------------------------------------------


def test_a_missing_base_names_the_file_and_field(tmp_path):
    path = write_experiment(tmp_path / "e.toml", {"full": []}, base="../nowhere.toml")
    err = located(path)
    assert (err.field, err.source) == ("experiment.base", f"{path}:4")
    assert str(err).startswith(f"{path}:4: experiment.base: ../nowhere.toml: no such file")


def test_the_base_is_relative_to_the_experiment_file(tmp_path):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "base.toml").write_text("[sample]\nk = 4\n")
    (tmp_path / "exps").mkdir()
    exp = load_experiment(write_experiment(tmp_path / "exps" / "e.toml", {"full": []}, base="../configs/base.toml"))
    assert exp.base == (tmp_path / "configs" / "base.toml").resolve()
    assert exp.run_config("full", 11).sample.k == 4


@pytest.mark.parametrize(("variants", "extra", "field", "message", "line"), [
    ({"full": []}, "seed = [1]\n", "experiment.seed", "unknown key; did you mean 'seeds'?", 8),
    ({"full": []}, "[variant.x]\n", "variant", "unknown key; did you mean 'variants'?", None),
    ({"full": []}, "baseline = \"ful\"\n", "experiment.baseline", "no variant 'ful'; did you mean 'full'?", 8),
    ({}, "", "variants", "missing: at least one", None),
])
def test_unknown_keys_suggest_the_known_one(tmp_path, variants, extra, field, message, line):
    """Named at the key's line where the file has one (a table only named inside another's header has none)."""
    path = tmp_path / "e.toml"
    err = located(write_experiment(path, variants, extra=extra))
    assert err.field == field and message in err.message
    assert err.source == (f"{path}:{line}" if line else str(path))


def test_an_unknown_variant_key_is_named(tmp_path):
    path = tmp_path / "e.toml"
    path.write_text(f'[experiment]\nname = "x"\nbase = {json.dumps(str(DEMO))}\nseeds = [1]\n'
                    '[variants.full]\nsett = ["sample.k=4"]\n')
    err = located(path)
    assert str(err) == f"{path}:6: variants.full.sett: unknown key; did you mean 'set'? (known: set)"


@pytest.mark.parametrize(("sets", "message"), [
    (["sample.k=1"], "sample.k: must be >= 2"),
    (["sample.kk=3"], "sample.kk: unknown field; did you mean 'k'?"),
    (["stages.grounder_data=nope"], "stages.grounder_data: 'nope' is not one of critic, raw, executed"),
    (["nonsense"], "nonsense: expected section.field=value"),
    (["run.seed=3"], "run.seed is set by the experiment"),
    ("sample.k=4", "expected a list of"),
])
def test_a_bad_variant_override_fails_up_front_naming_the_variant(tmp_path, sets, message):
    path = write_experiment(tmp_path / "e.toml", {"full": [], "bad": sets})
    err = located(path)
    assert err.field == "variants.bad.set" and err.source == f"{path}:13", str(err)
    assert message in str(err) and str(err).startswith(f"{path}:13: variants.bad.set: ")


@pytest.mark.parametrize(("head", "field", "message"), [
    ({"seeds": "[]"}, "experiment.seeds", "non-empty list"),
    ({"seeds": "[1, 1]"}, "experiment.seeds", "seed(s) 1 listed twice"),
    ({"seeds": "[true]"}, "experiment.seeds", "expected an integer"),
    ({"seeds": "[-1]"}, "experiment.seeds", "must be in [0, 4294967295]"),
    ({"iterations": "0"}, "experiment.iterations", "must be >= 1"),
    ({"name": '"a b"'}, "experiment.name", "letters, digits"),
    ({"set": '["sample.k=1"]'}, "experiment.set", "sample.k: must be >= 2"),
])
def test_experiment_fields_are_checked(tmp_path, head, field, message):
    values = {"name": '"x"', "base": json.dumps(str(DEMO)), "seeds": "[1, 2]", "iterations": "1", "set": "[]",
              **head}
    path = tmp_path / "e.toml"
    path.write_text("[experiment]\n" + "".join(f"{k} = {v}\n" for k, v in values.items()) + "[variants.a]\n")
    err = located(path)
    assert err.field == field and message in err.message, str(err)
    assert err.source == f"{path}:{list(values).index(field.split('.')[1]) + 2}"  # the field's own line


def test_the_id_hashes_what_runs_compute_not_which_runs(tmp_path):
    one = load_experiment(write_experiment(tmp_path / "a.toml", {"full": [], "k4": ["sample.k=4"]}))
    assert re.fullmatch(r"tiny-[0-9a-f]{8}", one.experiment_id)
    same = load_experiment(write_experiment(tmp_path / "b.toml", {"k4": ["sample.k=4"], "full": []},
                                            seeds=(1, 2, 3), iterations=5))
    assert same.experiment_id == one.experiment_id  # seeds, iterations, variant order only choose what to run
    for changed in (write_experiment(tmp_path / "c.toml", {"full": [], "k4": ["sample.k=5"]}),
                    write_experiment(tmp_path / "d.toml", {"full": [], "k4": ["sample.k=4"]}, shared=["sample.k=3"]),
                    write_experiment(tmp_path / "e.toml", {"full": []})):
        assert load_experiment(changed).experiment_id != one.experiment_id
    config = one.run_config("k4", 12, iterations=3)
    assert (config.sample.k, config.run.seed, config.run.iterations, config.run.name) == (4, 12, 3, "tiny/k4/s12")


@pytest.mark.parametrize(("preset", "variants", "iterations"), [
    ("ablations", {"full": (), "no_stage1": ("stages.stage1=false",), "no_stage2": ("stages.stage2=false",),
                   "no_critic": ("stages.grounder_data=raw",)}, 3),
    ("iterations", {"full": ()}, 5),
    ("critic", {"reference": (), "noisy": ("critic.error_rate=0.3",), "none": ("stages.grounder_data=raw",)}, 3),
    ("k", {"k4": ("sample.k=4",), "k8": ("sample.k=8",), "k15": ("sample.k=15",)}, 3),
])
def test_presets_load(preset, variants, iterations):
    exp = load_experiment(ROOT / "examples" / "experiments" / f"{preset}.toml")
    assert {v.name: v.set for v in exp.variants.values()} == variants
    assert exp.base == DEMO.resolve() and exp.iterations == iterations and exp.seeds == [11, 12, 13, 14, 15]
    assert exp.baseline == {"critic": "reference", "k": "k15"}.get(preset, "full")


@pytest.mark.parametrize("path", sorted((ROOT / "examples" / "experiments").glob("*.toml")), ids=lambda p: p.stem)
def test_every_committed_experiment_file_loads_and_each_variant_is_a_valid_run(path):
    """The tuning files are commands the README tells people to re-run: a typo in one must fail here, not there."""
    exp = load_experiment(path)
    assert exp.variants and exp.seeds
    for name in exp.variants:
        config = exp.run_config(name, exp.seeds[0])
        assert config.run.seed == exp.seeds[0]


def test_the_cli_help_lists_both_commands(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "experiment" in out and "report" in out


def test_bad_input_exits_2_before_anything_is_written(tmp_path, capsys):
    db = tmp_path / "s.duckdb"
    bad = write_experiment(tmp_path / "e.toml", {"full": [], "bad": ["sample.k=1"]})
    assert main(["experiment", "--config", str(bad), "--db", str(db), "--quiet"]) == 2
    assert capsys.readouterr().err.startswith(f"error: {bad}:13: variants.bad.set: sample.k: must be >= 2")
    good = write_experiment(tmp_path / "g.toml", {"full": [], "no_critic": ["stages.grounder_data=raw"]})
    assert main(["experiment", "--config", str(good), "--db", str(db), "--variants", "full,no_critc"]) == 2
    assert "did you mean 'no_critic'?" in capsys.readouterr().err
    assert main(["experiment", "--config", str(good), "--db", str(db), "--seeds", "1,x"]) == 2
    assert "--seeds: expected comma-separated integers" in capsys.readouterr().err
    # An empty item (a slip) ran the other seeds or variants unsaid.
    assert main(["experiment", "--config", str(good), "--db", str(db), "--seeds", "1,,2"]) == 2
    assert capsys.readouterr().err == ("error: command line: --seeds: an empty item in '1,,2' (item 2): expected "
                                       "comma-separated values\n")
    assert main(["experiment", "--config", str(good), "--db", str(db), "--variants", "full,"]) == 2
    assert "--variants: an empty item in 'full,' (item 2)" in capsys.readouterr().err
    models = write_experiment(tmp_path / "m.toml", {"full": [], "gone": [f"planner.path={tmp_path / 'nowhere'}"]})
    assert main(["experiment", "--config", str(models), "--db", str(db)]) == 2
    assert "variants.gone: planner.path:" in capsys.readouterr().err
    assert not db.exists() and not jobs_dir(db).exists()


def test_the_command_lines_set_applies_to_every_variant_and_is_part_of_the_definition(tmp_path, capsys):
    """An experiment could not be shrunk or moved from the command line (no --set): a user copied the preset to
    change run.workdir or data.train_limit. ``--set`` applies after the file's set, to every variant; it is part of
    the definition, so the same line keeps the id and another --set makes another experiment. A bad value names the
    --set, and a field each run sets is refused as in the file."""
    good = write_experiment(tmp_path / "g.toml", {"full": [], "no_stage1": ["stages.stage1=false"]},
                            shared=["data.train_limit=4"])
    plain = load_experiment(good)
    small = load_experiment(good, ["data.train_limit=2", f"run.workdir={tmp_path / 'runs'}"])
    again = load_experiment(good, ["data.train_limit=2", f"run.workdir={tmp_path / 'runs'}"])
    assert small.experiment_id == again.experiment_id != plain.experiment_id
    for variant in ("full", "no_stage1"):
        config = small.run_config(variant, 11, 1)
        assert config.data.train_limit == 2 and config.run.workdir == str(tmp_path / "runs")
    assert plain.run_config("full", 11, 1).data.train_limit == 4
    db = tmp_path / "s.duckdb"
    assert main(["experiment", "--config", str(good), "--db", str(db), "--set", "sample.k=1"]) == 2
    assert capsys.readouterr().err.startswith("error: --set sample.k=1: sample.k: must be >= 2")
    assert main(["experiment", "--config", str(good), "--db", str(db), "--set", "run.seed=3"]) == 2
    assert "error: command line: --set: run.seed is set by the experiment for each run" in capsys.readouterr().err
    assert main(["experiment", "--config", str(good), "--db", str(db), "--set", "data.train_limit=2",
                 "--dry-run"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["experiment"] == load_experiment(
        good, ["data.train_limit=2"]).experiment_id
    assert not db.exists()


# -- registering and planning (no models) ----------------------------------------------------------------------------


def test_register_widens_what_was_asked_and_names_the_older_definition(tmp_path):
    from engine.runner import register

    exp = load_experiment(write_experiment(tmp_path / "a.toml", {"full": []}, seeds=(1, 2)))
    edited = load_experiment(write_experiment(tmp_path / "b.toml", {"full": [], "k4": ["sample.k=4"]}))
    with Store(tmp_path / "s.duckdb") as store:
        assert register(store, exp, [1, 2], 1) == (True, [])
        created = store.query("SELECT created_at FROM experiments")["created_at"][0]
        assert register(store, exp, [3], 4) == (False, [])
        row = store.query("SELECT * FROM experiments WHERE experiment_id = ?", [exp.experiment_id]).iloc[0]
        recorded = json.loads(row.config_json)
        assert (recorded["seeds"], recorded["iterations"], row.created_at) == ([1, 2, 3], 4, created)
        assert recorded["variants"] == {"full": []} and recorded["baseline"] == "full"
        assert register(store, edited, [1], 1) == (True, [exp.experiment_id])


def test_plan_adopts_a_run_whose_link_a_kill_prevented(tmp_path):
    from engine.config import config_to_dict
    from engine.runner import ensure_run, linked_runs, plan_runs

    exp = load_experiment(write_experiment(tmp_path / "a.toml", {"full": [], "k4": ["sample.k=4"]}, seeds=(1, 2)))
    with Store(tmp_path / "s.duckdb") as store:
        # created by create_run, then killed before experiment_runs was written
        orphan = store.create_run("tiny/k4/s1", config_to_dict(exp.run_config("k4", 1, 1)), tmp_path)
        store.create_run("tiny/full/s1", config_to_dict(exp.run_config("k4", 1, 1)), tmp_path)  # another config
        plans = plan_runs(store, exp, ["full", "k4"], [1, 2], 2)
        assert [(p.name, p.run_id, p.linked) for p in plans] == [
            ("tiny/full/s1", None, False), ("tiny/k4/s1", orphan, False), ("tiny/full/s2", None, False),
            ("tiny/k4/s2", None, False)]
        assert plans[1].units == 1 + 8 * 2 and plans[0].units == 1 + 8 * 2  # nothing done yet, iterations 0..2
        assert ensure_run(store, exp, plans[1], 2) == orphan
        assert linked_runs(store, exp.experiment_id) == {("k4", 1): orphan}
        store.set_stage(orphan, 0, "evaluate", "done")
        assert plan_runs(store, exp, ["k4"], [1], 2)[0].units == 8 * 2
        assert plan_runs(store, exp, ["k4"], [1], 2)[0].linked


def test_an_edited_file_with_a_new_variant_reuses_the_runs_of_the_others(tmp_path):
    from engine.config import config_to_dict
    from engine.runner import ensure_run, linked_runs, plan_runs

    first = load_experiment(write_experiment(tmp_path / "a.toml", {"full": []}, seeds=(1,)))
    edited = load_experiment(write_experiment(tmp_path / "a.toml", {"full": [], "k4": ["sample.k=4"]}, seeds=(1,)))
    assert first.experiment_id != edited.experiment_id
    with Store(tmp_path / "s.duckdb") as store:
        made = ensure_run(store, first, plan_runs(store, first, ["full"], [1], 1)[0], 1)
        # a run of the same name but another config is never taken for it
        store.create_run("tiny/k4/s1", config_to_dict(first.run_config("full", 1, 1)), tmp_path)
        plans = plan_runs(store, edited, ["full", "k4"], [1], 1)
        assert [(p.name, p.run_id) for p in plans] == [("tiny/full/s1", made), ("tiny/k4/s1", None)]
        assert ensure_run(store, edited, plans[0], 1) == made
        assert linked_runs(store, edited.experiment_id) == {("full", 1): made}
        assert linked_runs(store, first.experiment_id) == {("full", 1): made}  # one run, in both experiments
        # a run an older engine made (its snapshot lacks fields added since, which take their defaults) is reused too
        older = config_to_dict(edited.run_config("k4", 1, 1))
        del older["grpo_grounder"], older["stages"]["grounder_objective"]
        made_before = store.create_run("tiny/k4/s1", older, tmp_path)
        assert plan_runs(store, edited, ["k4"], [1], 1)[0].run_id == made_before


# -- copying a run between store files (how job files are merged) ----------------------------------------------------


def test_copy_run_replaces_one_runs_rows_in_one_direction(tmp_path):
    with Store(tmp_path / "main.duckdb") as main_store:
        run_id = main_store.create_run("r", {"x": 1}, tmp_path)
        other = main_store.create_run("other", {"x": 2}, tmp_path)
        main_store.put_metrics(run_id, 0, [{"split": "held_in", "domain": "all", "name": "accuracy", "value": 0.1}])
        main_store.put_metrics(other, 0, [{"split": "held_in", "domain": "all", "name": "accuracy", "value": 0.9}])
        Store(tmp_path / "job.duckdb").close()
        assert main_store.copy_run(run_id, tmp_path / "job.duckdb", into_this=False)["metrics"] == 1
    with Store(tmp_path / "job.duckdb") as job:
        assert [r["run_id"] for r in job.list_runs()] == [run_id]
        job.put_metrics(run_id, 1, [{"split": "held_in", "domain": "all", "name": "accuracy", "value": 0.5}])
        job.set_stage(run_id, 1, "evaluate", "done")
        job.add_override({"run_id": run_id, "iteration": 1, "target": "pair", "task_id": "t", "step": 0,
                          "action": "swap", "curator": "ada"})
        job.write("critic_cache", [{"model": "m", "prompt_sha256": "h", "response_json": "{}"}])
    with Store(tmp_path / "main.duckdb") as main_store:
        copied = main_store.copy_run(run_id, tmp_path / "job.duckdb", into_this=True)
        assert copied["runs"] == 1 and copied["metrics"] == 2 and copied["stages"] == 1 and copied["overrides"] == 1
        metrics = main_store.query("SELECT run_id, iteration, value FROM metrics ORDER BY run_id, iteration")
        assert sorted(map(tuple, metrics.values.tolist())) == sorted([(run_id, 0, 0.1), (run_id, 1, 0.5),
                                                                      (other, 0, 0.9)])
        assert main_store.count("critic_cache", None) == 1
        again = main_store.copy_run(run_id, tmp_path / "job.duckdb", into_this=True)
        assert again == copied  # idempotent: the run's rows are replaced, not added to
        assert main_store.count("metrics", run_id) == 2 and main_store.count("overrides", run_id) == 1


# -- running an experiment on the tiny agents ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_setup(tmp_path_factory, tiny_agents_dir, demo_tasks):
    """A task file and the tiny-loop overrides (run.iterations left to the experiment)."""
    from engine.tasks import write_tasks
    from tests._tiny import tiny_overrides

    tmp = tmp_path_factory.mktemp("experiment")
    write_tasks(demo_tasks, tmp / "tasks.jsonl")
    overrides = [o for o in tiny_overrides(tmp, tiny_agents_dir, tmp / "tasks.jsonl") if "run." not in o]
    return tmp, overrides


def tiny_experiment(directory: Path, overrides: list[str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    return write_experiment(directory / "tiny.toml", {"full": [], "no_stage2": ["stages.stage2=false"]},
                            seeds=(1, 2), shared=[*overrides, f"run.workdir={directory / 'runs'}"])


def command(config: Path, db: Path, *more: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m engine experiment`` as its own process (a kill must not take pytest with it)."""
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    if not env:
        full_env.pop("MOAT_KILL_AT", None)
    return subprocess.run([sys.executable, "-m", "engine", "experiment", "--config", str(config), "--db", str(db),
                           "--quiet", *more], cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=900)


def last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def experiment_state(db: Path) -> dict:
    """Per (variant, seed): the run id, its stage states and row counts per table; plus every run id in the store."""
    with Store(db, read_only=True) as store:
        links = store.query("SELECT experiment_id, variant, seed, run_id FROM experiment_runs")
        state = {"experiments": sorted(set(links.experiment_id)), "all_runs": sorted(r["run_id"]
                                                                                       for r in store.list_runs())}
        for _, variant, seed, run_id in links.itertuples(index=False):
            stages = store.query("SELECT iteration, stage, status FROM stages WHERE run_id = ?", [run_id])
            state[(variant, int(seed))] = {
                "run_id": run_id, "stages": sorted(map(tuple, stages.values.tolist())),
                "rows": {t: store.count(t, run_id) for t in store.run_tables()}}
    return state


def all_done(state: dict) -> bool:
    return all(status in ("done", "skipped") for key, v in state.items() if isinstance(key, tuple)
               for _, _, status in v["stages"])


@pytest.fixture(scope="module")
def inprocess_run(tiny_setup):
    """The tiny experiment (2 variants x 2 seeds x 1 iteration) run once with --jobs 1, in this process: the
    reference the resumed and parallel runs are compared with."""
    tmp, overrides = tiny_setup
    config = tiny_experiment(tmp / "inprocess", overrides)
    db = tmp / "inprocess" / "s.duckdb"
    with pytest.MonkeyPatch.context() as patch:
        # Steady torch threads: an evaluation is reused only at the thread count it was computed with, and a busy
        # machine would lower this process's threads between runs (engine.threads.adapt_to_load).
        patch.setattr("engine.loop.adapt_to_load", ensure_thread_policy)
        code = main(["experiment", "--config", str(config), "--db", str(db), "--quiet"])
    return {"config": config, "db": db, "code": code, "state": experiment_state(db)}


@pytest.mark.slow
def test_a_tiny_experiment_makes_ordinary_runs_grouped_under_one_id(inprocess_run, capsys):
    db, state = inprocess_run["db"], inprocess_run["state"]
    assert inprocess_run["code"] == 0
    assert len(state["experiments"]) == 1 and len(state["all_runs"]) == 4
    assert {k for k in state if isinstance(k, tuple)} == {("full", 1), ("full", 2), ("no_stage2", 1),
                                                           ("no_stage2", 2)}
    assert all_done(state)
    for (variant, _), run in ((k, v) for k, v in state.items() if isinstance(k, tuple)):
        assert (1, "evaluate", "done") in run["stages"] and run["rows"]["metrics"] > 0 and run["rows"]["plans"] > 0
        assert ((1, "train_grounder", "skipped") in run["stages"]) == (variant == "no_stage2")
    with Store(db, read_only=True) as store:
        names = sorted(r["name"] for r in store.list_runs())
        seeds = {r["name"]: r["config"]["run"]["seed"] for r in store.list_runs()}
    assert names == ["tiny/full/s1", "tiny/full/s2", "tiny/no_stage2/s1", "tiny/no_stage2/s2"]
    assert seeds["tiny/full/s2"] == 2
    # Every run starts from the same agents on the same tasks: the first run (seed-major order: full, seed 1)
    # evaluates iteration 0 and the other three copy it (engine.eval_cache), with equal rows.
    first = state[("full", 1)]["run_id"]
    with Store(db, read_only=True) as store:
        origins = {key: store.stage_status(run["run_id"], 0)["evaluate"]["counts"].get("reused_from")
                   for key, run in state.items() if isinstance(key, tuple)}
        metrics = {key: store.frame("metrics", run["run_id"], 0).drop(columns=["run_id"]).to_dict("records")
                   for key, run in state.items() if isinstance(key, tuple)}
    assert origins == {("full", 1): None, ("full", 2): f"{first} iteration 0",
                       ("no_stage2", 1): f"{first} iteration 0", ("no_stage2", 2): f"{first} iteration 0"}
    assert all(rows == metrics[("full", 1)] for rows in metrics.values())
    # the same command again: the same experiment, nothing new, nothing run
    capsys.readouterr()
    assert main(["experiment", "--config", str(inprocess_run["config"]), "--db", str(db), "--quiet"]) == 0
    again = last_json(capsys.readouterr().out)
    assert again["experiment"] == state["experiments"][0] and again["status"] == "done"
    assert [r["status"] for r in again["runs"]] == ["already done"] * 4
    assert experiment_state(db) == state
    # the report reads it: two seeds per variant at iterations 0 and 1, each run with a wall time
    with Store(db, read_only=True) as store:
        report = experiment_report(store, again["experiment"])
    assert report["variants"]["full"]["iterations"]["1"]["seeds"] == [1, 2]
    assert all(r["status"] == "done" and r["wall_s"] > 0 for r in report["runs"])


@pytest.mark.slow
def test_more_iterations_extend_the_chosen_runs_of_the_same_experiment(inprocess_run, capsys, tmp_path):
    db = tmp_path / "copy.duckdb"  # the shared store stays as the other tests expect it
    shutil.copy(inprocess_run["db"], db)
    before = experiment_state(db)
    capsys.readouterr()
    code = main(["experiment", "--config", str(inprocess_run["config"]), "--db", str(db), "--quiet",
                 "--variants", "no_stage2", "--seeds", "2", "--iterations", "2"])
    out = last_json(capsys.readouterr().out)
    assert code == 0 and out["experiment"] == before["experiments"][0] and len(out["runs"]) == 1
    after = experiment_state(db)
    assert after["all_runs"] == before["all_runs"]
    assert (2, "evaluate", "done") in after[("no_stage2", 2)]["stages"]
    assert after[("full", 1)] == before[("full", 1)]
    with Store(db, read_only=True) as store:
        report = experiment_report(store, out["experiment"])
    assert report["iterations_requested"] == 2
    assert report["variants"]["no_stage2"]["iterations"]["2"]["seeds"] == [2]
    status = {(r["variant"], r["seed"]): r["status"] for r in report["runs"]}
    assert status[("no_stage2", 2)] == "done" and status[("full", 1)] == "incomplete"
    # each run records how far it goes: the extended one 2 (store and config.toml), the others still 1
    assert recorded_iterations(db) == {("full", 1): 1, ("full", 2): 1, ("no_stage2", 1): 1, ("no_stage2", 2): 2}
    # the same through a worker process (--jobs 2): its job file's runs row is merged back with the new count
    code = main(["experiment", "--config", str(inprocess_run["config"]), "--db", str(db), "--quiet",
                 "--variants", "full", "--seeds", "1", "--iterations", "2", "--jobs", "2"])
    assert code == 0 and last_json(capsys.readouterr().out)["runs"][0]["status"] == "done"
    assert recorded_iterations(db) == {("full", 1): 2, ("full", 2): 1, ("no_stage2", 1): 1, ("no_stage2", 2): 2}
    # a smaller --iterations later never lowers what a run records
    assert main(["experiment", "--config", str(inprocess_run["config"]), "--db", str(db), "--quiet",
                 "--variants", "full", "--seeds", "1", "--iterations", "1"]) == 0
    assert recorded_iterations(db)[("full", 1)] == 2


def recorded_iterations(db: Path) -> dict:
    """Per (variant, seed): the run's ``run.iterations`` in the store, checked equal to its config.toml's."""
    import tomllib

    found = {}
    with Store(db, read_only=True) as store:
        for _, variant, seed, run_id in store.query(
                "SELECT experiment_id, variant, seed, run_id FROM experiment_runs").itertuples(index=False):
            run = store.get_run(run_id)
            on_disk = tomllib.loads((Path(run["run_dir"]) / run_id / "config.toml").read_text())
            assert on_disk["run"]["iterations"] == run["config"]["run"]["iterations"], run_id
            found[(variant, int(seed))] = run["config"]["run"]["iterations"]
    return found


@pytest.mark.slow
def test_a_killed_experiment_resumes_to_completion_when_rerun(tiny_setup, inprocess_run):
    """The whole command SIGKILLed inside the first run's score stage; the same command again resumes that run and
    creates the next (one variant, two seeds)."""
    tmp, overrides = tiny_setup
    config = tiny_experiment(tmp / "killed", overrides)
    db = tmp / "killed" / "s.duckdb"
    killed = command(config, db, "--variants", "no_stage2", env={"MOAT_KILL_AT": "1:score:1"})
    assert killed.returncode == -9, killed.stderr[-3000:]
    state = experiment_state(db)
    (first,) = [k for k in state if isinstance(k, tuple)]
    assert first == ("no_stage2", 1) and (1, "score", "running") in state[first]["stages"]
    resumed = command(config, db, "--variants", "no_stage2")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    out = last_json(resumed.stdout)
    assert out["experiment"] == state["experiments"][0] and out["status"] == "done"
    assert [(r["variant"], r["seed"], r["status"]) for r in out["runs"]] == [("no_stage2", 1, "done"),
                                                                             ("no_stage2", 2, "done")]
    final = experiment_state(db)
    assert out["runs"][0]["run_id"] == final[first]["run_id"] == state[first]["run_id"]  # resumed, not recreated
    assert len(final["all_runs"]) == 2 and all_done(final)
    reference = inprocess_run["state"]
    for key in (("no_stage2", 1), ("no_stage2", 2)):
        assert final[key]["rows"] == reference[key]["rows"], key


@pytest.mark.slow
def test_parallel_jobs_give_the_runs_and_rows_of_jobs_1_and_resume_killed_workers(tiny_setup, inprocess_run):
    """--jobs 2 on the CPU: each run in a worker on its own DuckDB file, merged into the main store; workers killed
    mid-stage leave their job files, which the re-run resumes in place (the full variant, two seeds)."""
    tmp, overrides = tiny_setup
    config = tiny_experiment(tmp / "parallel", overrides)  # its own checkpoint directory: otherwise the same
    db = tmp / "parallel" / "s.duckdb"
    killed = command(config, db, "--jobs", "2", "--variants", "full", env={"MOAT_KILL_AT": "1:critique:1"})
    assert killed.returncode == 1, killed.stderr[-3000:]
    assert [r["status"] for r in last_json(killed.stdout)["runs"]] == ["failed", "failed"]
    assert len(list(jobs_dir(db).glob("*.duckdb"))) == 2
    partial = experiment_state(db)  # what the workers had done was merged when they died
    assert all((1, "critique", "running") in v["stages"] for k, v in partial.items() if isinstance(k, tuple))
    resumed = command(config, db, "--jobs", "2", "--variants", "full")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    out = last_json(resumed.stdout)
    assert out["experiment"] == partial["experiments"][0] and out["status"] == "done"
    assert not list(jobs_dir(db).glob("*.duckdb")) and not list(jobs_dir(db).glob("*.log"))
    state = experiment_state(db)
    reference = inprocess_run["state"]
    assert len(state["all_runs"]) == 2
    for key in (("full", 1), ("full", 2)):
        assert state[key]["run_id"] == partial[key]["run_id"]  # resumed in place, not created again
        assert state[key]["stages"] == reference[key]["stages"], key
        assert state[key]["rows"] == reference[key]["rows"], key


@pytest.mark.slow
def test_a_dry_run_after_a_killed_jobs_command_estimates_from_its_job_file(tiny_setup):
    """A ``--jobs N`` command SIGKILLed mid-run leaves the run's newest rows in its job file and none in the main
    store (which it merges only when a worker exits). Made here as ``engine.jobs`` makes it -- the run created in the
    main store, its job file seeded, then a real worker on it, killed as iteration 1's evaluation starts -- the dry
    run plans from the job file and costs what is left at the stage times the worker recorded (it said "no estimate
    (no done stage in this store)")."""
    from engine.jobs import seed_job_file, worker_env
    from engine.runner import ensure_run, job_file, plan_runs, register

    tmp, overrides = tiny_setup
    config = tiny_experiment(tmp / "killed-jobs", overrides)
    exp = load_experiment(config)
    db = tmp / "killed-jobs" / "s.duckdb"
    with Store(db) as store:
        register(store, exp, [1, 2], 1)
        run_id = ensure_run(store, exp, plan_runs(store, exp, ["full"], [1], 1)[0], 1)
        jobs_dir(db).mkdir(parents=True)
        seed_job_file(store, run_id, job_file(db, run_id))
    worker = subprocess.run([sys.executable, "-m", "engine.job_worker", "--db", str(job_file(db, run_id)), "--run",
                             run_id, "--iterations", "1"], cwd=ROOT, capture_output=True, text=True, timeout=900,
                            env={**worker_env(0, 1, []), "HF_HUB_OFFLINE": "1", "MOAT_KILL_AT": "1:evaluate:start"})
    assert worker.returncode == -9, worker.stderr[-3000:]
    with Store(job_file(db, run_id), read_only=True) as job:
        recorded = job.query("SELECT count(*) AS n, "
                             "sum(date_diff('millisecond', started_at, finished_at) / 1000.0 + earlier_s) AS s "
                             "FROM stages WHERE status = 'done'").iloc[0]
    with Store(db, read_only=True) as store:
        assert store.query("SELECT count(*) AS n FROM stages WHERE status = 'done'")["n"][0] == 0
    dry = command(config, db, "--variants", "full", "--dry-run")
    assert dry.returncode == 0, dry.stderr[-3000:]
    out = last_json(dry.stdout)
    assert [(r["run_id"], r["action"], r["units"]) for r in out["runs"]] == [(run_id, "resume", 1),
                                                                            (None, "create", 9)]
    # Every stage but iteration 1's evaluation is done once, so the run to create is costed at exactly those times;
    # an evaluation at iteration 0 (a cache read, usually) does not price one at iteration 1: both are left out.
    assert int(recorded["n"]) == 8 and out["estimate_from"] == "8 done stages of this experiment"
    assert out["estimate_s"] == pytest.approx(float(recorded["s"]), abs=0.051) and out["unestimated"] == 2
    assert "no estimate" not in dry.stderr and "of stage time" in dry.stderr
    assert out["new"] is False and out["other_definitions"] == []


def test_a_worker_whose_parent_is_gone_ends_quietly(loop_config, tmp_path):
    """A worker of a parallel experiment whose parent was SIGKILLed wrote its next event into a pipe nobody reads:
    a BrokenPipeError traceback in the job's log (the job file still resumed). It now takes it for a stop and ends
    cleanly."""
    from engine.loop import create_run

    db = tmp_path / "job.duckdb"
    with Store(db) as store:
        run_id = create_run(store, loop_config)
        store.set_stage(run_id, 0, "evaluate", "done")  # nothing left to run: the worker goes straight to its events
    worker = subprocess.Popen([sys.executable, "-m", "engine.job_worker", "--db", str(db), "--run", run_id,
                               "--iterations", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    worker.stdout.close()  # the parent's end of the pipe, gone as with a killed parent
    _, err = worker.communicate(timeout=300)
    assert worker.returncode == 0 and b"BrokenPipeError" not in err and b"Traceback" not in err, err[-2000:]


@pytest.mark.slow
def test_swap_lists_variants_whose_finished_runs_get_the_swap_table(inprocess_run, capsys, tmp_path):
    """``swap = [...]`` is not part of the experiment's identity: adding it to a finished experiment computes the
    swap tables of that variant's runs (and only those), and the report aggregates them over seeds."""
    db = tmp_path / "copy.duckdb"
    shutil.copy(inprocess_run["db"], db)
    config = inprocess_run["config"]
    text = config.read_text().replace("set = ", 'swap = ["full"]\nset = ', 1)
    with_swap = config.with_name("tiny-swap.toml")
    with_swap.write_text(text)
    assert load_experiment(with_swap).experiment_id == load_experiment(config).experiment_id
    capsys.readouterr()
    assert main(["experiment", "--config", str(with_swap), "--db", str(db), "--quiet"]) == 0
    out = last_json(capsys.readouterr().out)
    assert sorted((s["variant"], s["seed"]) for s in out["swaps"]) == [("full", 1), ("full", 2)]
    with Store(db, read_only=True) as store:
        report = experiment_report(store, out["experiment"])
        by_run = store.query("SELECT DISTINCT run_id FROM swaps")["run_id"].tolist()
    full_runs = {inprocess_run["state"][("full", s)]["run_id"] for s in (1, 2)}
    assert set(by_run) == full_runs
    sw = report["swaps"]["full"]
    assert (sw["base"], sw["after"], sw["seeds"]) == (0, 1, [1, 2])
    assert {"P0G0", "P1G0", "P0G1", "P1G1", "gold/G0", "gold/G1"} <= set(sw["cells"])
    assert set(sw["gains"]) == {"stage1", "stage2", "both"}
    # The diagonal cells are the runs' own evaluations.
    assert sw["cells"]["P1G1"]["held_in_accuracy"]["mean"] == pytest.approx(
        report["variants"]["full"]["iterations"]["1"]["held_in_accuracy"]["mean"])
    assert "Swap table: full" in report_markdown(report)
    capsys.readouterr()
    assert main(["experiment", "--config", str(with_swap), "--db", str(db), "--quiet"]) == 0
    assert last_json(capsys.readouterr().out)["swaps"] == []  # stored: not computed again


@pytest.mark.parametrize("preset", sorted(p.stem for pattern in ("tune-*.toml", "dev-*.toml")
                                           for p in (ROOT / "examples" / "experiments").glob(pattern)))
def test_tuning_presets_never_see_held_out_or_the_reported_seeds(preset):
    """The tune-* presets choose settings and the dev-* ones diagnose on dev: they run on seeds other than the
    reported 11-15 and never evaluate on held-out (the rule the README's results rest on)."""
    exp = load_experiment(ROOT / "examples" / "experiments" / f"{preset}.toml")
    assert not set(exp.seeds) & {11, 12, 13, 14, 15}
    for name in exp.variants:
        assert "held_out" not in exp.run_config(name, exp.seeds[0]).evaluate.splits, name


# -- the contents of the files an experiment reads --------------------------------------------------------------------


def test_fingerprints_follow_contents_not_paths(tmp_path, monkeypatch):
    from engine import fingerprint as fp

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "weights.bin").write_bytes(bytes(range(256)) * 4096)  # 1 MiB
    first = fp.fingerprint(model)
    copy = tmp_path / "copy"
    shutil.copytree(model, copy)
    assert fp.fingerprint(copy) == first  # the same bytes elsewhere: the same fingerprint
    (copy / "weights.bin").write_bytes(bytes(range(256)) * 4095 + bytes(255) + b"\x01")  # one byte differs
    assert fp.fingerprint(copy) != first
    (copy / "weights.bin").rename(copy / "renamed.bin")
    assert fp.fingerprint(copy) != fp.fingerprint(model)
    # a file over the limit is hashed from its size and sampled windows: a change inside the last window shows
    monkeypatch.setattr(fp, "FULL_HASH_LIMIT", 2**16)
    monkeypatch.setattr(fp, "WINDOW", 2**12)
    big = tmp_path / "big.bin"
    big.write_bytes(bytes(2**20))
    sampled = fp.fingerprint(big)
    big.write_bytes(bytes(2**20 - 1) + b"\x01")
    assert fp.fingerprint(big) != sampled
    big.write_bytes(bytes(2**20 + 1))
    assert fp.fingerprint(big) != sampled


def test_an_experiment_whose_models_changed_is_not_resumed(tmp_path, monkeypatch):
    """Rebuilt agents at the same path keep the config and the id: the runs made with the old ones must not be
    resumed or reused as if they were this experiment's (the store is left as it was)."""
    from engine.runner import ensure_run, plan_runs, register

    monkeypatch.chdir(tmp_path)
    for role in ("planner", "grounder"):
        shutil.copytree(ROOT / "assets" / "demo" / role, tmp_path / role)
    weights = tmp_path / "planner" / "model.safetensors"
    base = tmp_path / "base.toml"
    base.write_text(f"[data]\ntasks = {json.dumps(str(ROOT / 'examples/demo/tasks.jsonl'))}\n"
                    '[planner]\npath = "planner"\n[grounder]\npath = "grounder"\n')
    exp = load_experiment(write_experiment(tmp_path / "a.toml", {"full": []}, base=base, seeds=(1,)))
    assert set(exp.inputs()) == {"planner", "grounder", str(ROOT / "examples/demo/tasks.jsonl")}
    with Store(tmp_path / "s.duckdb") as store:
        register(store, exp, [1], 1)
        made = ensure_run(store, exp, plan_runs(store, exp, ["full"], [1], 1)[0], 1)
        before = store.query("SELECT config_json FROM experiments")["config_json"].tolist()
        shutil.copyfile(tmp_path / "grounder" / "model.safetensors", weights)  # "rebuilt" in place
        with pytest.raises(ConfigError) as info:
            register(store, exp, [1], 1)
        assert info.value.field == "experiment" and "planner changed since experiment" in info.value.message
        assert store.query("SELECT config_json FROM experiments")["config_json"].tolist() == before
        # an edited file (a new id) reuses runs of unchanged variants only if they read the same contents
        edited = load_experiment(write_experiment(tmp_path / "a.toml", {"full": [], "k4": ["sample.k=4"]},
                                                  base=base, seeds=(1,)))
        assert plan_runs(store, edited, ["full"], [1], 1)[0].run_id is None
        shutil.copyfile(ROOT / "assets" / "demo" / "planner" / "model.safetensors", weights)  # the first build back
        assert plan_runs(store, edited, ["full"], [1], 1)[0].run_id == made
        assert register(store, exp, [1], 1) == (False, [])
