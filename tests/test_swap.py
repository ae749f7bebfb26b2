"""The planner x grounder swap table: cells on the run's evaluation tasks, the diagonal reused from the evaluate
stage (and equal when recomputed), rows replaced in ``swaps``, McNemar by hand, the ``swap`` command."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine import eval_cache, swap
from engine.__main__ import main
from engine.config import config_to_dict, load_config
from engine.errors import StageStopped
from engine.eval_cache import EvaluationCache
from engine.evaluate import Trace, summarize
from engine.runtime import pick_eval_tasks
from engine.store import Store
from engine.swap import GOLD, SwapError, cell_name, paired_tests, swap_table

REPO = Path(__file__).resolve().parents[1]
CELLS = [(0, 0), (1, 0), (GOLD, 0), (1, 1), (0, 1), (GOLD, 1)]
METRICS = {"accuracy", "accuracy_lo", "accuracy_hi", "n", "correct", "gap_logppl", "gap_ppl"}


def _nested(frame) -> dict:
    out: dict = {}
    for r in frame.itertuples():
        value = int(r.value) if r.name in ("n", "correct") else r.value
        out.setdefault(r.split, {}).setdefault(r.domain, {})[r.name] = value
    return out


def _hand_mcnemar(before: dict[str, bool], after: dict[str, bool], ids: list[str]) -> tuple[int, int]:
    gained = lost = 0
    for i in ids:
        if after[i] and not before[i]:
            gained += 1
        elif before[i] and not after[i]:
            lost += 1
    return gained, lost


# -- scripted cells: the table's bookkeeping without models ----------------------------------------------------------

def _scripted_traces(a: int, b: int, tasks) -> tuple[dict, list[Trace]]:
    """A cell's summary and traces from a seeded coin per (cell, task): the same every call."""
    tasks = [t for t in tasks if t.gold_subgoals] if a == GOLD else tasks
    traces = []
    for t in tasks:
        rng = random.Random(f"{a}/{b}/{t.id}")
        correct = rng.random() < 0.3 + 0.2 * (a > 0) + 0.2 * (b > 0)
        traces.append(Trace(t.id, t.split, t.domain, "plan", ["s"], "R1 = x", True, {}, "1", t.answer, correct,
                            gold_logppl=rng.uniform(0.5, 3.0)))
    return summarize(traces), traces


def _scripted(a: int, b: int, tasks) -> tuple[dict, dict[str, bool]]:
    summary, traces = _scripted_traces(a, b, tasks)
    return summary, {t.task_id: t.correct for t in traces}


@pytest.fixture
def scripted_run(tmp_path, demo_tasks, monkeypatch):
    """A store with a run whose iterations 0 and 1 are evaluated (scripted metrics and traces, no models), and
    ``_compute_cell`` scripted the same way; yields (store, run_id, calls)."""
    config = load_config(None, ["data.eval_limit=5", "data.eval_seed=3", f"run.workdir={tmp_path / 'runs'}"])
    store = Store(tmp_path / "s.duckdb")
    run_id = store.create_run("scripted", config_to_dict(config), tmp_path / "runs", demo_tasks)
    tasks = pick_eval_tasks(store.get_tasks(run_id), config.evaluate.splits, 5, 3)
    for t in (0, 1):
        summary, outcomes = _scripted(t, t, tasks)
        rows = [{"split": s, "domain": d, "name": n, "value": float(v)}
                for s, ds in summary.items() for d, vs in ds.items() for n, v in vs.items()]
        store.put_metrics(run_id, t, rows)
        store.write("eval_traces", [{"run_id": run_id, "iteration": t, "task_id": task.id, "split": task.split,
                                     "domain": task.domain, "plan": "", "actions": "", "correct": outcomes[task.id],
                                     "trace_json": "{}"} for task in tasks])
        store.set_stage(run_id, t, "evaluate", "done")
    for role in ("planner", "grounder"):
        checkpoint = tmp_path / "runs" / role
        checkpoint.mkdir(parents=True)
        (checkpoint / "model.safetensors").write_bytes(role.encode())  # files to hash: the cells get cache keys
        store.put_checkpoint(run_id, 1, role, checkpoint, "full")
    calls = []

    def compute(ctx, a, b, tasks, qa):
        calls.append((a, b))
        return _scripted_traces(a, b, tasks)

    monkeypatch.setattr(swap, "_compute_cell", compute)
    yield store, run_id, calls
    store.close()


def test_paired_tests_count_discordant_tasks_per_split_and_domain(demo_tasks):
    tasks = [t for t in demo_tasks if t.split in ("held_in", "held_out")]
    rng = random.Random(0)
    before = {t.id: rng.random() < 0.5 for t in tasks}
    after = {t.id: rng.random() < 0.6 for t in tasks}
    result = paired_tests(before, after, tasks)
    for split in ("held_in", "held_out"):
        for domain in ("maths", "qa", "all"):
            ids = [t.id for t in tasks if t.split == split and domain in (t.domain, "all")]
            got = result[split][domain]
            assert (got["gained"], got["lost"]) == _hand_mcnemar(before, after, ids), (split, domain)
            assert got["n"] == len(ids)
    assert sum(result["held_in"]["all"][k] for k in ("gained", "lost")) > 0  # the data has discordant tasks


def test_scripted_table_reuses_the_diagonal_and_tests_by_hand(scripted_run):
    store, run_id, calls = scripted_run
    table = swap_table(store, run_id)
    assert (table["base"], table["after"]) == (0, 1)
    assert calls == [(1, 0), (GOLD, 0), (0, 1), (GOLD, 1)]  # the diagonal is read, not computed
    assert table["reused"] == ["P0G0", "P1G1"]
    assert list(table["cells"]) == ["P0G0", "P1G0", "P0G1", "P1G1"] and list(table["gold_plans"]) == ["G0", "G1"]
    assert table["cells"]["P1G1"] == _nested(store.frame("metrics", run_id, 1))
    config = swap.run_config(store, run_id)
    tasks = pick_eval_tasks(store.get_tasks(run_id), config.evaluate.splits, 5, 3)
    assert table["tasks"] == [t.id for t in tasks] and len(tasks) == 10
    outcomes = table["outcomes"]
    for key, after, before in (("stage1", "P1G0", "P0G0"), ("stage2", "P0G1", "P0G0"), ("both", "P1G1", "P0G0"),
                               ("gold_plans", "G1", "G0")):
        test = table["tests"][key]
        assert (test["after"], test["before"]) == (after, before)
        for split in ("held_in", "held_out"):
            ids = [t.id for t in tasks if t.split == split and t.id in outcomes[after]]
            got = test["results"][split]["all"]
            assert (got["gained"], got["lost"]) == _hand_mcnemar(outcomes[before], outcomes[after], ids)
    assert any(t["results"][s]["all"]["gained"] + t["results"][s]["all"]["lost"]
               for t in table["tests"].values() for s in ("held_in", "held_out"))
    rows = store.frame("swaps", run_id)
    assert set(zip(rows.planner_after, rows.grounder_after)) == set(CELLS)
    stored = rows[(rows.planner_after == 1) & (rows.grounder_after == 0) & (rows.domain == "all")]
    by_name = {(r.split, r.name): r.value for r in stored.itertuples()}
    result = table["tests"]["stage1"]["results"]["held_out"]["all"]
    assert by_name["held_out", "mcnemar_gained"] == result["gained"]
    assert by_name["held_out", "mcnemar_p"] == pytest.approx(result["p"])
    assert by_name["held_out", "accuracy"] == table["cells"]["P1G0"]["held_out"]["all"]["accuracy"]
    assert not rows[(rows.planner_after == 0) & (rows.grounder_after == 0)].name.str.startswith("mcnemar").any()


def test_scripted_rerun_replaces_the_cells_rows_and_keeps_others(scripted_run):
    store, run_id, _ = scripted_run
    swap_table(store, run_id)
    first = len(store.frame("swaps", run_id))
    stale = {"run_id": run_id, "split": "held_in", "domain": "stale", "name": "accuracy", "value": 1.0}
    store.write("swaps", [{**stale, "planner_after": 1, "grounder_after": 0},
                          {**stale, "planner_after": 7, "grounder_after": 7}])
    swap_table(store, run_id)
    rows = store.frame("swaps", run_id)
    assert len(rows) == first + 1
    stale_rows = rows[rows.domain == "stale"]
    assert set(zip(stale_rows.planner_after, stale_rows.grounder_after)) == {(7, 7)}


def test_scripted_reuse_off_and_missing_evaluation_compute_the_diagonal(scripted_run):
    store, run_id, calls = scripted_run
    assert swap_table(store, run_id, reuse=False)["reused"] == []
    assert calls == [(0, 0), (1, 0), (GOLD, 0), (1, 1), (0, 1), (GOLD, 1)]
    calls.clear()
    store.delete("eval_traces", run_id, 0)  # iteration 0's traces no longer cover the tasks
    assert swap_table(store, run_id)["reused"] == ["P1G1"] and (0, 0) in calls


def test_scripted_stop_writes_nothing(scripted_run):
    store, run_id, calls = scripted_run
    stops = iter([False, False, True])  # a stop after two computed cells
    with pytest.raises(StageStopped):
        swap_table(store, run_id, should_stop=lambda: next(stops))
    assert calls == [(1, 0), (GOLD, 0)] and store.count("swaps", run_id) == 0
    cache = Path(swap.run_config(store, run_id).run.workdir) / eval_cache.DIRECTORY
    assert not list(cache.glob("*.json.gz")), "a stopped table left cache entries behind"


def test_scripted_cells_are_kept_and_a_second_table_computes_none(scripted_run):
    store, run_id, calls = scripted_run
    first = swap_table(store, run_id)
    assert first["not_kept"] == {} and first["not_reusable"] == {} and first["reused_from"] == {}
    calls.clear()
    second = swap_table(store, run_id)
    assert calls == [], "a kept cell was computed again"
    assert second["reused"] == ["P0G0", "P1G1", "P1G0", "G0", "P0G1", "G1"]
    assert second["reused_from"] == {c: f"{run_id} iteration 1, swap cell {c}" for c in ("P1G0", "G0", "P0G1", "G1")}
    for group in ("cells", "gold_plans", "outcomes", "tests"):
        assert second[group] == first[group], group
    assert "G0 from run " in swap_markdown_of(second)
    # With reuse off nothing is read.
    calls.clear()
    assert swap_table(store, run_id, reuse=False)["reused_from"] == {} and len(calls) == 6


def swap_markdown_of(table: dict) -> str:
    from engine.commands.swap import markdown

    return markdown(table)


def test_scripted_a_workdir_that_cannot_keep_cells_still_gets_the_table(scripted_run):
    store, run_id, calls = scripted_run
    blocked = Path(swap.run_config(store, run_id).run.workdir) / eval_cache.DIRECTORY
    blocked.write_text("a file where the cache directory would go")  # refused even to root, unlike a chmod
    table = swap_table(store, run_id)
    assert set(table["not_kept"]) == {"P1G0", "G0", "P0G1", "G1"}
    assert all(why.startswith(str(blocked)) for why in table["not_kept"].values())
    assert store.count("swaps", run_id) > 0 and len(calls) == 4


def test_bad_requests_raise_swap_error(scripted_run):
    store, run_id, _ = scripted_run
    with pytest.raises(SwapError, match="no run 'nope'"):
        swap_table(store, "nope")
    with pytest.raises(SwapError, match="iteration 2 .* no done evaluate stage"):
        swap_table(store, run_id, after=2)
    with pytest.raises(SwapError, match="base must be"):
        swap_table(store, run_id, base=1, after=1)
    with pytest.raises(SwapError, match="base must be"):
        swap_table(store, run_id, base=-1)
    store.set_stage(run_id, 1, "evaluate", "failed")
    # The last evaluated iteration is now 0 (a run stopped in iteration 1): this said "base must be an iteration
    # from 0 to after - 1 = -1, got 0".
    with pytest.raises(SwapError, match=rf"run {run_id} has iteration 0 evaluated but no later one: .*\(evaluated: "
                                        rf"0\); finish an iteration first \(python -m engine run --run {run_id}\)"):
        swap_table(store, run_id)


def test_cli_errors_exit_2_and_a_held_store_exits_3(scripted_run, capsys):
    store, run_id, _ = scripted_run
    db = str(store.path)
    store.close()
    assert main(["swap", "--db", str(Path(db).with_name("missing.duckdb")), "--run", run_id]) == 2
    assert capsys.readouterr().err == f"error: no store at {Path(db).with_name('missing.duckdb')}\n"
    assert not Path(db).with_name("missing.duckdb").exists()
    assert main(["swap", "--db", db, "--run", "nope"]) == 2
    assert "error: no run 'nope'" in capsys.readouterr().err
    assert main(["swap", "--db", db, "--run", run_id, "--after", "3"]) == 2
    assert "no done evaluate stage" in capsys.readouterr().err
    assert main(["swap", "--db", db, "--run", run_id, "--base", "1", "--after", "1"]) == 2
    assert "error: base must be" in capsys.readouterr().err
    with Store(db):  # this process holds the file: a second process cannot open it
        out = subprocess.run([sys.executable, "-m", "engine", "swap", "--db", db, "--run", run_id],
                             capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 3, out.stderr
    lines = out.stderr.strip().splitlines()  # on stderr: stdout is for the table or its JSON
    assert out.stdout == "" and len(lines) == 1 and lines[0].startswith("error: ")
    assert "open in another process" in lines[0]


def test_cli_quiet_prints_the_table_and_no_progress(scripted_run, capsys):
    """``--quiet`` as in run and experiment: no progress bar on stderr, the table still on stdout."""
    store, run_id, _ = scripted_run
    db = str(store.path)
    store.close()
    assert main(["swap", "--db", db, "--run", run_id, "--json"]) == 0
    shown = capsys.readouterr()
    assert "iter 1 swap" in shown.err and json.loads(shown.out)["run_id"] == run_id
    assert main(["swap", "--db", db, "--run", run_id, "--json", "--quiet"]) == 0
    quiet = capsys.readouterr()
    assert quiet.err == "" and json.loads(quiet.out)["run_id"] == run_id


def test_cli_labels_the_base_row_warm_start_only_when_the_warm_start_trained_the_agents(scripted_run, capsys,
                                                                                          tmp_path):
    """Iteration 0's agents are the models as loaded unless ``[warm_start]`` ran: the markdown called them "warm
    start" either way. They are the starting agents (as the report and the studio say), warm-started when the
    warm start recorded their checkpoints."""
    store, run_id, _ = scripted_run
    db = str(store.path)
    store.close()
    assert main(["swap", "--db", db, "--run", run_id, "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "| P0 G0 (starting agents) |" in out and "warm" not in out
    assert main(["swap", "--db", db, "--run", run_id, "--quiet", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["warm_started"] == []
    with Store(db) as store:
        for role in ("planner", "grounder"):  # what warm_start_planner / warm_start_grounder record
            checkpoint = tmp_path / "runs" / f"warm-{role}"
            checkpoint.mkdir(parents=True)
            (checkpoint / "model.safetensors").write_bytes(f"warm {role}".encode())
            store.put_checkpoint(run_id, 0, role, checkpoint, "full")
    assert main(["swap", "--db", db, "--run", run_id, "--quiet"]) == 0
    assert "| P0 G0 (starting agents, warm-started) |" in capsys.readouterr().out
    assert main(["swap", "--db", db, "--run", run_id, "--quiet", "--base", "0", "--after", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["warm_started"] == ["planner", "grounder"]


# -- a real one-iteration run on the tiny agents ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def real_run(tmp_path_factory, tiny_agents_dir, demo_tasks) -> tuple[Path, str]:
    """A one-iteration tiny run (iteration 0 and 1 evaluated), built once; tests work on copies of its store."""
    from engine.loop import create_run, run_loop
    from engine.tasks import write_tasks
    from tests._tiny import tiny_overrides

    tmp = tmp_path_factory.mktemp("swap_run")
    write_tasks(demo_tasks, tmp / "tasks.jsonl")
    config = load_config(None, tiny_overrides(tmp, tiny_agents_dir, tmp / "tasks.jsonl"))
    with Store(tmp / "s.duckdb") as store:
        run_id = create_run(store, config)
        assert run_loop(store, run_id) == "done"
    return tmp / "s.duckdb", run_id


@pytest.fixture
def real_store(real_run, tmp_path):
    db, run_id = real_run
    for suffix in ("", ".wal"):
        if Path(f"{db}{suffix}").exists():
            shutil.copy(f"{db}{suffix}", f"{tmp_path / 's.duckdb'}{suffix}")
    with Store(tmp_path / "s.duckdb") as store:
        # The run's workdir (and its evaluation cache) is shared by the module's tests: each starts with no swap cell
        # kept, so what one test's table computed is not what the next one reads.
        cache = Path(swap.run_config(store, run_id).run.workdir) / eval_cache.DIRECTORY
        for entry in cache.glob("*.json.gz"):
            kept = EvaluationCache(cache).get(entry.name.removesuffix(".json.gz"))
            if kept is None or kept.cell:
                entry.unlink()
        yield store, run_id


@pytest.mark.slow
def test_real_table_has_every_cell_reuses_the_diagonal_and_loads_each_model_once(real_store, monkeypatch):
    store, run_id = real_store
    from engine.stages import context

    loads = []
    real_load = context.load_agent

    def load(section, path=None):
        loads.append(path or section.path)
        return real_load(section, path)

    monkeypatch.setattr(context, "load_agent", load)
    table = swap_table(store, run_id)
    assert table["reused"] == ["P0G0", "P1G1"]
    assert sorted(loads) == sorted(set(table["agents"].values())) and len(loads) == 4  # each model once
    assert table["agents"]["P1"] == store.checkpoint(run_id, 1, "planner")["path"]
    assert table["agents"]["G0"] == swap.run_config(store, run_id).grounder.path
    assert table["cells"]["P0G0"] == _nested(store.frame("metrics", run_id, 0))
    assert table["cells"]["P1G1"] == _nested(store.frame("metrics", run_id, 1))
    traces = store.frame("eval_traces", run_id, 1)
    expected = {(s, d) for s, d in zip(traces.split, traces.domain)}
    expected |= {(s, "all") for s, _ in expected}
    for group in ("cells", "gold_plans"):
        for name, summary in table[group].items():
            got = {(s, d) for s, ds in summary.items() for d in ds}
            assert got == expected, (name, got)
            for s, d in got:
                assert METRICS <= set(summary[s][d]), (name, s, d)
                if d == "all":
                    assert summary[s][d]["n"] == (traces.split == s).sum(), (name, s)
    rows = store.frame("swaps", run_id)
    assert set(zip(rows.planner_after, rows.grounder_after)) == set(CELLS)
    gold = rows[(rows.planner_after == GOLD) & (rows.grounder_after == 1)]
    assert METRICS <= set(gold.name) and set(gold.split) == set(traces.split)
    first = len(rows)
    loads.clear()
    second = swap_table(store, run_id)
    # Every computed cell was kept in the run's evaluation cache: the second table loads no model.
    assert sorted(second["reused"]) == sorted(cell_name(a, b) for a, b in CELLS) and loads == []
    assert second["reused_from"]["G0"] == f"{run_id} iteration 1, swap cell G0"
    assert second["cells"] == table["cells"] and second["gold_plans"] == table["gold_plans"]
    assert second["outcomes"] == table["outcomes"]
    again = store.frame("swaps", run_id)
    assert len(again) == first and not again.duplicated(["planner_after", "grounder_after", "split", "domain",
                                                        "name"]).any()


@pytest.mark.slow
def test_real_recomputed_diagonal_equals_the_stored_metrics(real_store):
    store, run_id = real_store
    swap_table(store, run_id)  # computes the off-diagonal and gold-plans cells and keeps them
    kept = swap_table(store, run_id)  # ... and reads them back
    assert set(kept["reused_from"]) == {"P1G0", "P0G1", "G0", "G1"}
    table = swap_table(store, run_id, reuse=False)
    assert table["reused"] == [] and table["reused_from"] == {}
    # A kept cell is what a recomputation gives, metric for metric and task for task.
    for group in ("cells", "gold_plans"):
        for name in kept[group]:
            assert kept[group][name] == table[group][name], name
    assert kept["outcomes"] == table["outcomes"]
    for t in (0, 1):
        stored = _nested(store.frame("metrics", run_id, t))
        cell = table["cells"][f"P{t}G{t}"]
        assert set(cell) == set(stored)
        for split, domains in stored.items():
            assert set(cell[split]) == set(domains)
            for domain, values in domains.items():
                for name in ("n", "correct", "accuracy"):
                    assert cell[split][domain][name] == values[name], (t, split, domain, name)
                # the gap depends on every plan and task: same tasks, same greedy plans, same value
                assert cell[split][domain]["gap_logppl"] == pytest.approx(values["gap_logppl"], rel=1e-6)
        traces = store.frame("eval_traces", run_id, t)
        assert table["outcomes"][f"P{t}G{t}"] == dict(zip(traces.task_id, map(bool, traces.correct)))


@pytest.mark.slow
def test_real_cli_json_and_markdown(real_store, capsys):
    store, run_id = real_store
    db = str(store.path)
    store.close()
    assert main(["swap", "--db", db, "--run", run_id, "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert set(table) >= {"run_id", "base", "after", "cells", "gold_plans", "tests", "reused", "seconds"}
    assert set(table["tests"]) == {"stage1", "stage2", "both", "gold_plans"}
    assert main(["swap", "--db", db, "--run", run_id, "--markdown", "--after", "1", "--base", "0"]) == 0
    out = capsys.readouterr().out
    split = next(iter(table["cells"]["P0G0"]))
    domain = next(d for d in table["cells"]["P0G0"][split] if d != "all")
    header = next(line for line in out.splitlines() if line.startswith("| agents |"))
    assert f"{split.replace('_', '-')} {domain}" in header and "grounder on gold plans" in header
    values = table["cells"]["P1G0"][split][domain]
    row = next(line for line in out.splitlines() if line.startswith("| P1 G0 (stage 1 only) |"))
    assert f"{values['correct']}/{values['n']}" in row
    for label in ("P0 G0 (starting agents)", "P0 G1 (stage 2 only)", "P1 G1 (both)", "stage 1 alone: P1 G0 vs P0 G0",
                  "Reused, from the evaluate stage's stored metrics or the evaluation cache"):
        assert label in out


@pytest.mark.slow
def test_ground_plans_grounds_gold_plans_one_subgoal_per_turn_when_iterative(tiny_agents, demo_tasks, monkeypatch):
    from engine import evaluate as ev
    from engine.config import EvaluateSection
    from engine.prompts import format_subgoals

    _, grounder = tiny_agents
    tasks = [t for t in demo_tasks if t.split == "held_in" and len(t.gold_subgoals) > 1][:3]
    prompts = []
    real_generate = ev.generation.generate

    def generate(model, tokenizer, batch, config):
        prompts.extend(batch)
        return real_generate(model, tokenizer, batch, config)

    monkeypatch.setattr(ev.generation, "generate", generate)
    for formulation, turns in (("onetime", len(tasks)), ("iterative", sum(len(t.gold_subgoals) for t in tasks))):
        prompts.clear()
        settings = EvaluateSection(batch_size=4, ground_max_new_tokens=8, formulation=formulation)
        traces = ev.ground_plans(grounder, tasks, [t.gold_subgoals for t in tasks], settings)
        assert [t.task_id for t in traces] == [t.id for t in tasks]
        assert [t.plan for t in traces] == [format_subgoals(t.gold_subgoals) for t in tasks]
        assert len(prompts) == turns, formulation


def _skipped(update) -> bool:
    import gradio as gr

    return update == gr.skip()


def test_a_swap_watch_says_how_the_swap_job_ended():
    from studio.tab_metrics import swap_ended

    assert swap_ended({"label": "swap", "running": True, "status": "running"}) is None  # still running: nothing sent
    assert "has finished" in swap_ended({"label": "swap", "running": False, "status": "finished", "run_id": "r"})
    assert "stopped" in swap_ended({"label": "swap", "running": False, "status": "stopped"})
    assert swap_ended({"label": "swap", "running": False, "status": "failed",
                       "error": "disk full\nTraceback ..."}) == "The swap job failed: disk full"
    assert "has finished" in swap_ended({"label": "next_stage", "running": True})  # the swap ended before it


def test_the_studio_computes_the_swap_table_as_a_job(scripted_run):
    """The Metrics tab's *Compute the swap table*: ``python -m engine swap`` cannot open the store the studio holds,
    so the studio runs ``swap_table`` as a job on its worker; the Metrics table then shows it. A run with no
    iteration evaluated after 0 is refused with the reason, and no job starts."""
    from studio.app import build_app
    from studio.jobs import swap_unavailable
    from studio.metrics_swaps import swap_markdown

    store, run_id, calls = scripted_run
    assert "No swap table stored" in swap_markdown(store, run_id, spaces=False)
    demo = build_app(store, "examples/demo.toml")
    try:
        endpoint = {f.api_name: f.fn for f in demo.fns.values()}
        compute, watch = endpoint["metrics_swap_compute"], endpoint["metrics_swap_watch"]
        message, timer = compute(run_id, "ann", None)
        assert message.startswith(f"Started `swap` on `{run_id}`") and timer.active  # the page starts watching
        assert demo.moat_jobs.wait(60)
        snap = demo.moat_jobs.snapshot()
        assert (snap["status"], snap["result"], snap["label"]) == ("finished", "done", "swap"), snap
        assert calls and store.count("swaps", run_id) > 0
        table = swap_markdown(store, run_id, spaces=False)
        assert "No swap table stored" not in table and "P1G0" in table
        _, swaps, ended, timer = watch(run_id)  # the watch's next tick: the new table, how it ended, and it stops
        assert swaps == table and "has finished" in ended and timer.active is False
        store.set_stage(run_id, 1, "evaluate", "running")  # iteration 1 no longer evaluated: nothing to pair
        assert "no iteration after 0 whose evaluate stage is done" in swap_unavailable(store, run_id)
        message, timer = compute(run_id, "ann", None)
        assert "no iteration after 0" in message and _skipped(timer)  # refused: nothing to watch
        assert compute(None, "ann", None)[0] == "Pick a run first."
    finally:
        demo.close()
