"""Studio handlers called directly (no server) on a tmp store made by a tiny loop: sample, score, pairs, ground and
critique of iteration 1 with the tiny agents, plus a few metrics/train-log rows for the charts."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from engine.agreement import agreement as critic_agreement
from engine.config import load_config
from engine.loop import create_run, run_stage
from engine.store import Store
from engine.tasks import write_tasks
from tests._studio import (  # noqa: F401  (fixtures: run_id, store)
    add_iterative_iteration,
    blocking_job,
    studio_run_id,
    studio_store,
    write_iterative_task,
)
from tests._tiny import tiny_overrides


def build_studio_store(path: Path, agents: Path, demo_tasks, extra: tuple[str, ...] = ()) -> str:
    """Write a store with one run through critique of iteration 1 (and chart rows); returns the run id.
    ``extra`` are more ``--set`` overrides on top of the tiny loop's (the load test uses more tasks)."""
    tasks_file = path.parent / "tasks.jsonl"
    write_tasks(demo_tasks, tasks_file)
    config = load_config(None, [*tiny_overrides(path.parent, agents, tasks_file), *extra])
    with Store(path) as store:
        run_id = create_run(store, config)
        for stage in ("sample", "score", "pairs", "ground", "critique"):
            assert run_stage(store, run_id, 1, stage, config=config) == "done"
        for it in (0, 1):
            store.put_metrics(run_id, it, [{"split": s, "domain": d, "name": n, "value": 0.1 * (it + 1)}
                                           for s in ("held_in", "held_out") for d in ("maths", "qa", "all")
                                           for n in ("accuracy", "gap_logppl")])
        store.add_train_logs(run_id, 1, "train_planner", [
            {"step": i, "loss": 0.7 - 0.1 * i, "rewards/margins": 0.1 * i, "rewards/accuracies": 0.5} for i in (1, 2)])
        store.add_train_logs(run_id, 1, "train_grounder", [{"step": i, "loss": 3.0 - i} for i in (1, 2)])
    return run_id


@pytest.fixture(scope="session")
def studio_db(tmp_path_factory, tiny_agents_dir, demo_tasks) -> tuple[Path, str]:
    path = tmp_path_factory.mktemp("studio_db") / "studio.duckdb"
    return path, build_studio_store(path, tiny_agents_dir, demo_tasks)


def test_pairs_filters_and_override_changes_the_store(store, run_id):
    from studio import tab_pairs

    df, total = tab_pairs.pairs_table(store, run_id, 1)
    assert total == len(df) > 0 and df["key"].str.count(r"\|").eq(2).all()
    key = df["key"][0]
    question = df["question"][0]
    assert tab_pairs.pairs_table(store, run_id, 1, text=question[:12])[1] >= 1
    assert tab_pairs.pairs_table(store, run_id, 1, min_margin=1e9)[1] == 0
    assert tab_pairs.pairs_table(store, run_id, 1, overridden="yes")[1] == 0
    prompt, chosen, rejected = tab_pairs.pair_detail(store, run_id, 1, key)
    assert "log-PPL" in chosen and "log-PPL" in rejected and "&lt;|user|&gt;" in prompt

    assert "“Swap” recorded" in tab_pairs.pair_action(store, run_id, 1, key, "swap", "alice")
    after = store.pairs_page(run_id, 1, overridden=True)
    assert list(after["curator"]) == ["alice"] and after["chosen_k"][0] == df["rejected_k"][0]
    tab_pairs.pair_action(store, run_id, 1, key, "exclude", "alice", reason="noise")
    assert tab_pairs.pairs_table(store, run_id, 1, excluded="yes")[1] == 1
    tab_pairs.pair_action(store, run_id, 1, key, "tie", "bob")
    assert tab_pairs.pairs_table(store, run_id, 1, ties="yes")[1] == 1
    tab_pairs.pair_action(store, run_id, 1, key, "restore", "bob")
    assert tab_pairs.pairs_table(store, run_id, 1, overridden="yes")[1] == 0
    ks = sorted(int(k) for k in store.task_plans(run_id, 1, key.split("|")[0])["k"])
    with pytest.raises(ValueError):
        tab_pairs.pair_action(store, run_id, 1, key, "choose", "bob", ks[0], ks[0])
    assert tab_pairs.margin_figure(store, run_id, 1).data and tab_pairs.length_figure(store, run_id, 1).data


def test_pairs_are_named_by_their_question_and_walked_with_j_and_k(store, run_id):
    from engine.surprisal import SurprisalService
    from studio import tab_pairs
    from studio.keys import neighbour

    def keys_neighbour(*args, **kw):  # the Pairs tab's page size
        return neighbour(*args[:5], tab_pairs.PAGE, **kw)

    df, total = tab_pairs.pairs_table(store, run_id, 1)
    key, question = df["key"][0], df["question"][0]
    label = tab_pairs.pair_label(question, key, df["chosen_k"][0], df["rejected_k"][0])
    assert "|" not in label and " ".join(question.split())[:30] in label
    assert f"plan {df['chosen_k'][0]} over {df['rejected_k'][0]}" in label
    labels = [tab_pairs.pair_label(q, k, c, r) for q, k, c, r in zip(df["question"], df["key"], df["chosen_k"],
                                                                     df["rejected_k"])]
    assert len(set(labels)) == len(labels)  # questions may start alike; the picker still tells pairs apart
    prompt, _, rejected = tab_pairs.pair_detail(store, run_id, 1, key)
    assert "margin" in prompt and "moat-diff" in rejected  # the two plans' word diff
    keys = list(df["key"])
    assert keys_neighbour(keys[0], keys, 1, total, 1) == (keys[1], 1)
    assert keys_neighbour(keys[1], keys, 1, total, -1) == (keys[0], 1)
    assert keys_neighbour(keys[0], keys, 1, total, -1) == (keys[0], 1)  # the first pair: nothing moves
    from studio.keys import stuck_words  # ...and the curator is told why, not left with an unanswered key

    assert stuck_words("pair", -1, False) == "This is the first pair of the queue."
    assert stuck_words("verdict", 1, True).startswith("Every verdict after this one in the queue is open by another")
    full = [f"t{i}|0|0" for i in range(tab_pairs.PAGE)]  # a full first page of PAGE + 1 pairs
    assert keys_neighbour(full[-1], full, 1, tab_pairs.PAGE + 1, 1) == (None, 2)  # past the page: the next one
    assert keys_neighbour(full[-1], full, 1, tab_pairs.PAGE, 1) == (full[-1], 1)  # the last pair of all
    assert keys_neighbour(keys[0], keys, 2, 100, -1) == (None, 1)
    # Items another curator holds are skipped (engine.leases), in both directions and up to the page's end.
    assert keys_neighbour(keys[0], keys, 1, total, 1, skip={keys[1]}) == (keys[2], 1)
    assert keys_neighbour(keys[2], keys, 1, total, -1, skip={keys[1]}) == (keys[0], 1)
    assert keys_neighbour(full[-2], full, 1, tab_pairs.PAGE + 1, 1, skip={full[-1]}) == (None, 2)

    evidence = tab_pairs.pair_evidence(store, SurprisalService(), run_id, 1, key)
    assert evidence.count("moat-tok") > 4 and "under the rejected plan" in evidence and "stored" in evidence
    assert "no longer exists" in tab_pairs.pair_evidence(store, SurprisalService(), run_id, 1, "nope|0|0")


def test_plans_browse_bars_and_diff(store, run_id):
    from studio import tab_plans

    page = tab_plans.task_page(store, run_id, 1, size=5)
    assert len(page) == 5 and page["total"][0] == store.count("tasks", run_id) and page["plans"][0] == 3
    sampled = store.query("SELECT count(DISTINCT task_id) AS n FROM plans WHERE run_id = ? AND iteration = 1",
                          [run_id])["n"][0]
    assert 0 < sampled < page["total"][0] and page["with_plans"][0] == sampled  # the info line's count
    assert list(page.columns[:5]) == ["task_id", "domain", "split", "plans", "question"]  # the count on screen
    assert tab_plans.task_page(store, run_id, 1, domain="qa")["domain"].eq("qa").all()
    assert tab_plans.task_page(store, run_id, 1, text=page["task_id"][0])["total"][0] == 1
    html = tab_plans.plans_html(store, run_id, 1, page["task_id"][0])
    assert html.count("k=") == 3 and "chosen" in html and "rejected" in html
    diff = tab_plans.plan_diff(store, run_id, 1, page["task_id"][0], 0, 1)
    assert "moat-diff" in diff
    # The diff pickers name each plan as the table does, best first, by "step:k"; a bare k (API callers) still works.
    plans = store.task_plans(run_id, 1, page["task_id"][0])
    choices = tab_plans.diff_choices(plans)
    assert [v for _, v in choices] == [f"0:{k}" for k in plans["k"]]
    assert all(label.startswith(f"k={k} · log-PPL {lp:.4f}") for (label, _), k, lp in
               zip(choices, plans["k"], plans["logppl"]))
    assert tab_plans.plan_diff(store, run_id, 1, page["task_id"][0], "0:0", "0:1") == diff
    assert tab_plans.plan_diff(store, run_id, 1, page["task_id"][0], "0:99", 0) == "<p>Both plans must exist.</p>"
    assert tab_plans.plan_diff(store, run_id, 1, page["task_id"][0], "x:y", 0) == "<p>Both plans must exist.</p>"
    from studio.render import word_diff_html

    assert word_diff_html("a b c", "a x c") == ("<div class='moat-diff' style='white-space:pre-wrap'>a "
                                                "<del style='background:#fdd'>b</del> "
                                                "<ins style='background:#dfd'>x</ins> c</div>")


def test_plan_diff_tells_the_steps_of_an_iterative_task_apart(tmp_path):
    """An iterative run samples K candidates per step, each step numbering its own from k=0: the pickers name the step,
    and a diff compares the plans of the steps picked (keyed by k alone, step 1's k=0 hid step 0's)."""
    import re

    from studio import tab_plans
    from studio.stage_text import stage_summary

    with Store(tmp_path / "s.duckdb") as store:
        write_iterative_task(store, "r", 1, "t", {0: [("add the apples", 0.9), ("add the pears", 0.2),
                                                      ("add the apples", 0.5)],
                                                  1: [("share the sum", 0.3), ("halve the sum", None)]})
        choices = tab_plans.diff_choices(store.task_plans("r", 1, "t"))
        assert choices == [("step 0 · k=1 · log-PPL 0.2000", "0:1"),
                           ("step 0 · k=2 · log-PPL 0.5000 · same text as k=0", "0:2"),
                           ("step 0 · k=0 · log-PPL 0.9000", "0:0"),
                           ("step 1 · k=0 · log-PPL 0.3000", "1:0"), ("step 1 · k=1 · not scored", "1:1")]
        diff = tab_plans.plan_diff(store, "r", 1, "t", "0:0", "1:0")
        assert "apples" in diff and "share" in diff and "halve" not in diff
        assert tab_plans.plan_diff(store, "r", 1, "t", 0, 1) == tab_plans.plan_diff(store, "r", 1, "t", "0:0", "0:1")
        assert tab_plans.plan_diff(store, "r", 1, "t", "2:0", "0:0") == "<p>Both plans must exist.</p>"
        # Each step's bars span its own log-PPL range (steps score different gold actions): step 1's one scored plan
        # sits mid-way, not at step 0's low end.
        widths = re.findall(r"width:(\d+)%", tab_plans.plans_html(store, "r", 1, "t"))
        assert widths == ["10", "49", "100", "55", "0"]
        # The Run tab's pairs line counts task-steps, not tasks, in an iterative run.
        store.write("pairs", [{"run_id": "r", "iteration": 1, "task_id": "t", "step": step, "pair_idx": 0,
                               "chosen_k": 1, "rejected_k": 0, "chosen_logppl": 0.2, "rejected_logppl": 0.9,
                               "margin": 0.7, "rule": "best_worst"} for step in (0, 1)])
        assert stage_summary(store, "r", 1, "pairs", "done", {"groups": 2}) == (
            "2 pairs from 2 of 2 task-steps (1 task), median margin 0.70")


def test_the_pairs_table_tells_the_steps_of_an_iterative_task_apart(tmp_path):
    """An iterative run pairs each task-step: the table had no step column and, its key clipped on screen, two steps
    of one task read as the same row. Every row now shows its step, whatever the order or filter, and a row click
    (the key in its first cell) opens that step's pair; a onetime run's pairs are all step 0."""
    import gradio as gr

    from studio.app import build_app
    from studio.pairs_queue import COLUMNS, WIDTHS, pairs_table, parse_key
    from tests._store_world import IT, RUN, build_world

    with Store(tmp_path / "s.duckdb") as store:
        build_world(store)  # iteration IT: onetime pairs (step 0)
        iterative = add_iterative_iteration(store)  # the next one: two steps per task, one pair per task-step
        assert COLUMNS[:2] == ["key", "step"] and len(WIDTHS) == len(COLUMNS)
        df, total = pairs_table(store, RUN, iterative)
        assert total == 4 and df["step"].tolist() == [1, 2, 1, 2]
        assert df["question"][0] == df["question"][1]  # the same task: the step tells the rows apart
        for order in ("task", "margin", "-margin", "length", "unreviewed", "shuffled"):
            rows, _ = pairs_table(store, RUN, iterative, order=order)
            assert [parse_key(k)[1] for k in rows["key"]] == rows["step"].tolist(), order
        assert pairs_table(store, RUN, iterative, order="-margin")[0]["step"].tolist()[:2] == [2, 2]
        second, _ = pairs_table(store, RUN, iterative, text="m1 second step")
        assert second[["key", "step"]].values.tolist() == [["m1|2|0", 2]]
        assert pairs_table(store, RUN, iterative, min_margin=1.0)[0]["step"].tolist() == [2, 2]
        assert set(pairs_table(store, RUN, IT)[0]["step"]) == {0}  # onetime

        fns = {f.api_name: f for f in build_app(store, "examples/demo.toml").fns.values() if f.api_name}
        table = fns["pairs_search"].fn(RUN, iterative, "", "", "", "any", "any", "any", "-margin", 1, None, "ann",
                                       None)[1]
        row = table.iloc[1]  # m2's step 2 under "largest margin first"
        clicked = fns["pairs_select_row"].fn(gr.SelectData(None, {"index": [1, 4], "value": row["margin"],
                                                                  "row_value": row.tolist(), "selected": True}))
        assert clicked == row["key"] == "m2|2|0"
        prompt, chosen, rejected = fns["pairs_detail"].fn(RUN, iterative, clicked)[:3]
        assert " · step 2 · plan 1 over 0 · m2" in prompt
        assert "m2 second step, plan b" in chosen and "m2 second step, plan a" in rejected


def test_plans_filters_offer_what_the_run_holds(store, run_id):
    from studio import tab_plans

    held = store.query("SELECT DISTINCT domain, split FROM tasks WHERE run_id = ?", [run_id])
    facets = store.task_facets(run_id)
    assert facets["domain"] == sorted(set(held["domain"])) and set(facets["split"]) == set(held["split"])
    order = ["train", "dev", "held_in", "held_out"]
    assert facets["split"] == sorted(facets["split"], key=order.index)  # pipeline order, not alphabetical
    updates = tab_plans.filter_choices(store, run_id, {"domain": "web", "split": facets["split"][-1]})
    assert updates["domain"]["choices"] == [("all", "")] + [(d, d) for d in facets["domain"]]
    assert updates["domain"]["value"] == ""  # a domain the run lacks goes back to all
    assert updates["split"]["value"] == facets["split"][-1]  # one it has is kept
    assert tab_plans.filter_choices(store, None, {})["split"]["choices"] == [("all", "")]
    # A run whose first stage is still running: a task can be listed, but there is no iteration to show yet.
    assert "No iteration picked" in tab_plans.plans_html(store, run_id, None, "any-task")
    # An evaluation task has no sampled plans: the page says why instead of a bare "No plans".
    held_in = store.get_tasks(run_id, split="held_in", limit=1)[0].id
    assert "training tasks only, and this is a held_in task" in tab_plans.plans_html(store, run_id, 1, held_in)
    assert tab_plans.plans_html(store, run_id, 1, "no-such-task") == "<p>No plans for no-such-task in iteration 1.</p>"


def test_critic_queue_edit_validates_and_executes(store, run_id):
    from studio import tab_critic

    df, total = tab_critic.verdict_table(store, run_id, 1)
    assert total == len(df) > 0
    key = df["key"][0]
    original, corrected, diff, start = tab_critic.verdict_detail(store, run_id, 1, key)
    assert "Grounded actions" in original and "Corrected actions" in corrected
    bad = tab_critic.save_edit(store, run_id, 1, key, "R1 Calculator(2 + 3", "carol")
    assert "parse error" in bad and tab_critic.verdict_table(store, run_id, 1, reviewed="yes")[1] == 0
    preview = tab_critic.preview_edit(store, run_id, key, "R1 = Calculator(2 + 3)")
    assert "5" in preview
    saved = tab_critic.save_edit(store, run_id, 1, key, "R1 = Calculator(2 + 3)", "carol")
    assert "Edit saved" in saved and "R1" in saved
    row = store.verdict_queue(run_id, 1, overridden=True)
    assert list(row["override_action"]) == ["edit"] and list(row["curator"]) == ["carol"]
    assert tab_critic.verdict_action(store, run_id, 1, key, "drop", "dave").startswith("“Drop”")
    assert "Agreement" in tab_critic.agreement_markdown(store, run_id, 1)
    # "overruled" lists exactly the agreement's disagreements (a drop overrules an accepted or corrected verdict)
    agreement = critic_agreement(store, run_id, 1)
    overruled, n = tab_critic.verdict_table(store, run_id, 1, reviewed="overruled")
    assert list(overruled["key"]) == [tab_critic.verdict_key(d["task_id"], d["step"], d["k"])
                                      for d in agreement["disagreements"]] and n == agreement["disagreed"]
    status = store.verdict_queue(run_id, 1, overridden=True)["status"][0]
    assert (n == 1) == (status in ("accepted", "corrected"))
    text = tab_critic.agreement_markdown(store, run_id, 1)
    assert "by tool:" in text and "by decision: drop" in text  # decisions in words, not stored names
    # the live decision is dave's drop (carol's edit came before it): it agrees unless it overruled the critic
    assert f"by curator: dave {0 if n == 1 else 1}/1" in text and "carol" not in text
    assert ("Overruled the critic (1)" in text) == (n == 1)
    assert tab_critic.verdict_table(store, run_id, 1, status="no-such-status")[1] == 0


def test_metrics_figures_build_and_compare(store, run_id):
    from studio import tab_metrics

    figs = tab_metrics.figures(store, run_id)
    assert set(figs) == set(tab_metrics.FIGURES)
    for name in ("accuracy", "gap_logppl", "dpo_rewards", "dpo_loss", "sft_loss", "pairs", "critic"):
        assert figs[name].data, name
    # each iteration's first logged step is marked on the step axis ("it N"), as the logs say
    for name, stage in (("dpo_loss", "train_planner"), ("dpo_rewards", "train_planner"),
                        ("sft_loss", "train_grounder")):
        first = store.train_log_rows(run_id, stage).reset_index(drop=True).reset_index().groupby("iteration")["index"]
        first = first.min()  # the row of each iteration's first logged step; the axis counts steps from 1
        assert len(first) and [sh.x0 for sh in figs[name].layout.shapes] == [i + 0.5 for i in first], name
        marks = [a.text for a in figs[name].layout.annotations if a.name == tab_metrics.ITERATION_MARK]
        assert marks == [f"it {it}" for it in first.index], name
    other = store.create_run("ablation", store.get_run(run_id)["config"], "runs")
    store.put_metrics(other, 0, [{"split": "held_in", "domain": "all", "name": "accuracy", "value": 0.3}])
    both = tab_metrics.figures(store, run_id, other)
    names = [t.name for t in both["accuracy"].data]
    assert any(n.startswith("A ") for n in names) and "B held_in/all" in names


def test_export_writes_files(store, run_id, tmp_path):
    from studio import tab_export

    path, rows = tab_export.export_file(store, run_id, 1, "pairs", "jsonl", tmp_path)
    assert path.exists() and rows == len(path.read_text().splitlines()) > 0
    path, rows = tab_export.export_file(store, run_id, 1, "sft", "parquet", tmp_path)
    assert path.exists() and path.suffix == ".parquet"
    assert "No HF_TOKEN" in tab_export.push_to_hub(store, run_id, 1, "pairs", "me/data", None)


def test_the_export_tab_refuses_what_the_iteration_cannot_hold_and_writes_nothing(store, run_id, tmp_path):
    """Iteration 0's pairs, or SFT records of an iteration whose ground stage has not run, gave a download of an empty
    file (the CLI already refused them): now the reason, nothing written; a stage that ran and kept nothing still
    exports its empty file, which the tab says is the data."""
    from studio import tab_export

    out = tmp_path / "exports"
    out.mkdir()
    with pytest.raises(tab_export.NothingToExport, match="iteration 0 samples no plans"):
        tab_export.export_file(store, run_id, 0, "pairs", "jsonl", out)
    store.set_stage(run_id, 2, "sample", "running")  # iteration 2 has started: no ground stage yet
    with pytest.raises(tab_export.NothingToExport, match=r"its ground stage has not run \(the Run tab's"):
        tab_export.export_file(store, run_id, 2, "sft", "jsonl", out)
    assert list(out.iterdir()) == []
    assert "Nothing exported" in tab_export.push_to_hub(store, run_id, 0, "pairs", "me/data", "hf_token")
    store.set_stage(run_id, 2, "pairs", "done")  # the stage ran and kept no pair: the empty file is the data
    path, rows = tab_export.export_file(store, run_id, 2, "pairs", "jsonl", out)
    assert rows == 0 and path.exists() and path.read_text() == ""


def test_config_validation_names_the_field_and_cli_command():
    from studio import new_run_config as box
    from studio.spaces_policy import spaces_capped

    text = Path("examples/demo.toml").read_text()
    assert box.validate_config(text)[1] == ""
    config, error = box.validate_config(text.replace("k = 15", "k = 1"))
    assert config is None and error.startswith("**sample.k, line ")
    assert box.validate_config(text + "\n[sample]\nbogus = 1\n")[1].startswith("**TOML syntax, line ")
    assert box.validate_config(text.replace("top_p = 0.95", "top_p = 2", 1))[1].startswith("**sample.top_p, line ")
    cmd = box.cli_command("examples/demo.toml", text.replace("k = 15", "k = 4"))
    assert cmd == "python -m engine run --config examples/demo.toml --set sample.k=4"
    # Spaces refuses over-cap sizes (naming the field) and starts the editor from a capped config instead.
    assert box.validate_config(text, spaces=True)[1].startswith("**data.train_limit, line ")
    capped_text = box.config_toml(spaces_capped(load_config("examples/demo.toml")))
    capped, error = box.validate_config(capped_text, spaces=True)
    assert error == "" and capped.sample.k == 4 and capped.data.train_limit == 16
    assert box.validate_config(text.replace("assets/demo/planner", "gpt2"), spaces=True)[1].startswith(
        "**planner.path, line ")
    # a curriculum phase cannot lift a cap either
    phased = capped_text.replace("phases = []\n", "") + '\n[[schedule.phases]]\nname = "big"\nset = ["sample.k=15"]\n'
    set_line = len(phased.splitlines())  # the phase's set = [...], the text's last line
    assert box.validate_config(phased, spaces=True)[1].startswith(
        f"**schedule.phases[1].set, line {set_line}**: sample.k: at most 4")
    assert box.validate_config(phased.replace("sample.k=15", "sample.k=3"), spaces=True)[1] == ""


def test_job_worker_refuses_a_second_job_and_reattaches(store, run_id):
    from studio import run_jobs
    from studio.jobs import JobWorker

    jobs = JobWorker(store)
    started = threading.Event()
    job = blocking_job(started, done=1, total=4, eta_s=3.0, poll_s=0.02)
    assert jobs.submit("next_stage", run_id, job, user="alice") is None
    assert started.wait(10)
    refused = jobs.start_loop("next_iteration", run_id, user="bob")
    assert refused and refused.startswith("Refused") and "alice" in refused
    # A second session (or a reload) only has the shared worker: it sees the running job and its progress.
    snap = jobs.snapshot()
    assert snap["running"] and snap["label"] == "next_stage" and snap["events"][-1]["done"] == 1
    page = run_jobs.job_markdown(jobs)
    assert "running" in page and "1/4" in page and "ETA 3s" in page
    assert jobs.stop().startswith("Stop requested") and jobs.wait(10)
    assert jobs.snapshot()["status"] == "stopped"
    assert JobWorker(store, read_only=True).start_loop("next_stage", run_id).startswith("This studio is read-only")


def test_job_worker_runs_the_next_real_stage(store, run_id):
    from studio.jobs import JobWorker, loop_target

    assert loop_target(store, run_id, "next_stage") == (0, 1)  # iteration 0's evaluate comes first
    assert loop_target(store, run_id, "rest_of_iteration") == (0, None)
    store.set_stage(run_id, 0, "evaluate", "skipped")
    assert loop_target(store, run_id, "next_stage") == (1, 1)
    assert loop_target(store, run_id, "next_iteration") == (2, None)  # iteration 1 has started
    jobs = JobWorker(store)
    store.set_stage(run_id, 1, "pairs", "pending")
    assert jobs.start_loop("next_stage", run_id) is None and jobs.wait(60)
    assert jobs.snapshot()["result"] == "paused"
    assert store.stage_status(run_id, 1)["pairs"]["status"] == "done"


def test_two_sessions_see_each_others_overrides(store, run_id):
    """Two sessions share the store object: a pair swapped in one shows in the other's next page load."""
    from studio import tab_critic, tab_pairs

    key = tab_pairs.pairs_table(store, run_id, 1)[0]["key"][0]
    tab_pairs.pair_action(store, run_id, 1, key, "swap", "session-a")
    seen = tab_pairs.pairs_table(store, run_id, 1, overridden="yes")[0]
    assert list(seen["curator"]) == ["session-a"]
    vkey = tab_critic.verdict_table(store, run_id, 1)[0]["key"][0]
    tab_critic.verdict_action(store, run_id, 1, vkey, "drop", "session-b")
    assert list(tab_critic.verdict_table(store, run_id, 1, reviewed="yes")[0]["curator"]) == ["session-b"]


def test_build_app_and_curator_identity(store, run_id):
    import gradio as gr

    from studio.app import build_app
    from studio.common import curator_of

    demo = build_app(store, "examples/demo.toml")
    assert isinstance(demo, gr.Blocks) and demo.moat_jobs.store is store
    assert curator_of("  erin ", None) == "erin"
    with pytest.raises(gr.Error):
        curator_of("", None)

    class Req:
        username = "frank"

    assert curator_of("erin", Req()) == "frank"


def test_app_flags(tmp_path, monkeypatch):
    import app

    monkeypatch.setenv("GRADIO_SERVER_PORT", "7999")
    monkeypatch.delenv("MOAT_DB", raising=False)
    args = app.parse_args([])
    assert (args.db, args.config, args.port, args.read_only) == ("runs/studio.duckdb", "examples/demo.toml", 7999,
                                                                 False)
    users = tmp_path / "users.txt"
    users.write_text("# team\nann:pw1\n\nben:pw2\n")
    assert app.parse_auth(str(users)) == [("ann", "pw1"), ("ben", "pw2")]
    assert app.parse_auth("ann:pw") == [("ann", "pw")]
    assert app.parse_auth("ann:p,w") == [("ann", "p,w")]  # a comma alone is a password's
    with pytest.raises(SystemExit, match="looks like a list"):  # once read as ann with password "pw1,ben:pw2"
        app.parse_auth("ann:pw1,ben:pw2")
    with pytest.raises(SystemExit):
        app.parse_auth("nopassword")


def test_requirements_match_pyproject():
    """Spaces installs requirements.txt; it must list exactly pyproject's dependencies."""
    import tomllib

    root = Path(__file__).resolve().parents[1]
    deps = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    lines = (root / "requirements.txt").read_text().splitlines()
    assert [line.strip() for line in lines if line.strip() and not line.startswith(("#", "--"))] == deps


def test_viewer_accounts_cannot_change_anything(store):
    import gradio as gr

    from studio.common import Ctx, check_writable

    ctx = Ctx(store=store, jobs=None, read_only=False, spaces=False, run=None, iteration=None, curator=None,
              viewers=frozenset({"vera"}))

    class Viewer:
        username = "vera"

    class Curator:
        username = "ann"

    with pytest.raises(gr.Error, match="read-only viewer"):
        check_writable(ctx, Viewer())
    check_writable(ctx, Curator())  # a curator account may change things
    ctx.read_only = True
    with pytest.raises(gr.Error, match="read-only"):
        check_writable(ctx, Curator())


def test_each_view_is_one_in_order_event(tmp_path):
    """The queue overlaps calls (``studio.app.CONCURRENCY``), so a view refreshed by several triggers must be ONE
    ``always_last`` event: two events of one session sharing a handler could finish out of order and paint a
    stale page (an iteration-less Plans page) over the fresh one."""
    from collections import Counter

    from studio.app import CONCURRENCY, build_app

    with Store(tmp_path / "empty.duckdb") as store:
        demo = build_app(store, "examples/demo.toml")
    assert CONCURRENCY > 1
    # (events with no server function run in the browser only, in the order they fire: not concerned)
    refreshing = [f for f in demo.fns.values() if f.fn is not None
                  and any(e in ("change", "submit", "blur", "tick") for _, e in f.targets)]
    shared = [name for name, n in Counter(id(f.fn) for f in refreshing).items() if n > 1]
    assert not shared, [f.name for f in refreshing if id(f.fn) in shared]
    assert all(f.trigger_mode == "always_last" for f in refreshing if len(f.targets) > 1)


def test_an_override_the_studio_acknowledged_survives_sigkill_right_after(tmp_path):
    """The 'recorded ... (override #id)' a curator reads is returned after the commit: a studio process killed
    right after showing it loses nothing (Guarantees: nothing is lost)."""
    from tests._store_world import IT, RUN, build_world

    path = tmp_path / "ws.duckdb"
    with Store(path) as s:
        build_world(s)
    code = ("import json, os, signal, sys\nfrom engine.store import Store\nfrom studio import tab_critic, tab_pairs\n"
            f"s = Store(sys.argv[1])\n"
            f"acks = [tab_pairs.pair_action(s, {RUN!r}, {IT}, 'm1|0|0', 'swap', 'ann'),\n"
            f"        tab_critic.verdict_action(s, {RUN!r}, {IT}, 'm2|0|0', 'keep_original', 'bob')]\n"
            "print(json.dumps(acks), flush=True)\nos.kill(os.getpid(), signal.SIGKILL)\n")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[1], timeout=300)
    assert out.returncode == -signal.SIGKILL, out.stderr
    acks = json.loads(out.stdout.strip().splitlines()[-1])
    ids = [int(a.rsplit("#", 1)[1].rstrip(").")) for a in acks]
    with Store(path) as s:
        stored = s.frame("overrides", RUN)
        assert stored["override_id"].tolist() == ids
        assert stored["curator"].tolist() == ["ann", "bob"] and stored["action"].tolist() == ["swap", "keep_original"]
        assert s.pairs_page(RUN, IT, overridden=True)["task_id"].tolist() == ["m1"]


def test_stage_table_shows_a_dead_running_stage_as_interrupted(tmp_path):
    from studio.tab_run import stage_table
    from tests._store_world import IT, RUN, build_world

    with Store(tmp_path / "ws.duckdb") as s:
        build_world(s)
        s.set_stage(RUN, IT, "ground", "running")
        assert stage_table(s, RUN)["status"].tolist() == ["interrupted"]
        assert stage_table(s, RUN, live=True)["status"].tolist() == ["running"]


def test_the_run_tab_says_what_each_stage_did_in_words(tmp_path):
    """One human line per stage, from its counts and the rows it wrote: never the counts' JSON."""
    from studio.tab_run import stage_table
    from tests._store_world import IT, RUN, build_world

    with Store(tmp_path / "ws.duckdb") as s:
        build_world(s)  # 3 auto pairs (margins 1.5, 0.3, 0.7) and verdicts: 1 accepted, 1 corrected, 1 unfixable
        s.write("metrics", [{"run_id": RUN, "iteration": IT, "split": split, "domain": "all", "name": "accuracy",
                             "value": value} for split, value in (("held_in", 0.68), ("held_out", 0.271))])
        done = {"sample": {"rows": 8, "new_rows": 8}, "pairs": {"rows": 3, "groups": 3},
                "train_planner": {"rows": 3, "log_lines": 4, "precision": "fp32 (bf16 = false)"},
                "critique": {"rows": 3}, "evaluate": {"rows": 450, "metrics": 74},
                "train_grounder": {"rows": 480, "new_rows": 96, "original_rows": 384}}
        for stage, counts in done.items():
            s.set_stage(RUN, IT, stage, "running")
            s.set_stage(RUN, IT, stage, "done", counts=counts)
        s.set_stage(RUN, IT, "ground", "skipped", counts={"note": "stage 2 disabled (stages.stage2 = false)"})
        table = stage_table(s, RUN).set_index("stage")
    assert "counts" not in table.columns
    assert table.loc["sample", "summary"] == "8 plans sampled"
    assert table.loc["pairs", "summary"] == "3 pairs from 3 tasks, median margin 0.70 (of 3 task-steps)"
    assert table.loc["train_planner", "summary"] == "DPO on 3 rows, fp32 (bf16 = false)"
    assert table.loc["critique", "summary"] == "3 verdicts: 1 accepted, 1 corrected, 1 unfixable"
    assert table.loc["evaluate", "summary"] == "450 tasks evaluated: held-in 68.0%, held-out 27.1%"
    assert table.loc["train_grounder", "summary"] == "SFT on 480 rows (96 new + 384 original)"
    assert table.loc["ground", "summary"] == "skipped: stage 2 disabled (stages.stage2 = false)"
    # in pipeline order, the skipped stage (never started) in its place, not after the evaluation
    assert list(table.index) == ["sample", "pairs", "train_planner", "ground", "critique", "train_grounder",
                                 "evaluate"]


def test_the_critique_line_says_how_to_judge_error_verdicts_again_until_the_grounder_trains(tmp_path):
    from studio.tab_run import stage_table
    from tests._store_world import IT, RUN, build_world

    with Store(tmp_path / "ws.duckdb") as s:
        build_world(s)
        s.query("UPDATE verdicts SET status = 'error' WHERE run_id = ? AND status = 'unfixable'", [RUN])
        s.set_stage(RUN, IT, "critique", "running")
        s.set_stage(RUN, IT, "critique", "done", counts={"rows": 3})
        line = stage_table(s, RUN).set_index("stage").loc["critique", "summary"]
        assert line == (f"3 verdicts: 1 accepted, 1 corrected, 1 error; `python -m engine step critique --db "
                        f"{s.path} --run {RUN} --iteration {IT} --retry-errors`, with the studio stopped (one process "
                        "per store), judges the errors again")
        s.set_stage(RUN, IT, "train_grounder", "running")
        s.set_stage(RUN, IT, "train_grounder", "done", counts={"rows": 4})
        # trained on them: too late to judge again (the step refuses), so the line no longer offers it
        assert stage_table(s, RUN).set_index("stage").loc["critique", "summary"] == (
            "3 verdicts: 1 accepted, 1 corrected, 1 error")


def test_no_empty_chart_is_drawn(tmp_path):
    """Without data a chart says so in words instead of drawing empty axes; with data it draws the data only."""
    from studio import tab_metrics, tab_run
    from tests._store_world import RUN, build_world

    with Store(tmp_path / "ws.duckdb") as s:
        build_world(s)
        for fig in [tab_run.loss_figure(s, RUN), tab_run.loss_figure(s, None),
                    *tab_metrics.figures(s, None).values()]:
            assert [a.text for a in fig.layout.annotations] and fig.layout.xaxis.visible is False
        s.add_train_logs(RUN, 0, "train_planner", [{"step": 1, "loss": 0.69}, {"step": 2, "loss": 0.6}])
        drawn = tab_run.loss_figure(s, RUN)
        # Its one annotation is the panel's title (role and objective), not a "no data" note.
        assert [a.text for a in drawn.layout.annotations] == ["planner loss (DPO)"]
        assert drawn.layout.xaxis.visible is not False and list(drawn.data[0].y) == [0.69, 0.6]


def test_a_verdict_shows_what_the_grounder_saw(tmp_path):
    from studio.tab_critic import verdict_detail
    from tests._store_world import IT, RUN, build_world

    with Store(tmp_path / "ws.duckdb") as s:
        build_world(s)
        row = s.frame("groundings", RUN, IT, task_id="m2").iloc[0].to_dict()
        s.write("groundings", [{**row, "prompt": "<|user|>\nGround these subgoals for m2\n<|assistant|>\n"}])
        original, _, _, _ = verdict_detail(s, RUN, IT, "m2|0|0")
    assert "What the grounder saw" in original and "Ground these subgoals for m2" in original


def test_a_first_visit_to_an_empty_store_starts_a_demo_run_to_browse(tmp_path, loop_config):
    """``first_visit``: an empty, writable store gets a one-iteration demo run started at once, with a welcome that
    says what happens and where to look; a store that has runs, or a read-only one, is never touched."""
    from engine.config import config_to_toml
    from studio.app import build_app
    from studio.first_visit import SHOWCASE_NAME, welcome
    from studio.jobs import JobWorker

    config_file = tmp_path / "demo.toml"
    config_file.write_text(config_to_toml(loop_config))
    with Store(tmp_path / "fresh.duckdb") as s:
        jobs = JobWorker(s)
        demo = build_app(s, str(config_file), jobs=jobs, first_visit=True)
        (run,) = s.list_runs()
        assert run["name"] == SHOWCASE_NAME and jobs.snapshot()["status"] != "idle"  # started at once
        seen = set()  # the welcome's live line, asked as the page's timer would while the real loop runs
        while jobs.running():
            text, _ = welcome(s, jobs, run["run_id"])
            if "*Now:* " in text:
                seen.add(text.split("*Now:* ")[1].split(" · ")[0])
            time.sleep(0.05)
        assert jobs.wait(timeout=300) and jobs.snapshot()["result"] == "done", jobs.snapshot()
        # The loop takes seconds, most stages far longer than a poll: several stages seen, of both iterations.
        assert any(w.startswith("iteration 1, stage ") for w in seen) and len(seen) >= 3, seen
        assert s.stage_status(run["run_id"], 1)["evaluate"]["status"] == "done"
        assert s.count("pairs", run["run_id"], 1) > 0 and s.count("verdicts", run["run_id"], 1) > 0
        assert "A demo run is being prepared for you" in str(demo.config)  # rendered while the job ran
        build_app(s, str(config_file), jobs=jobs, first_visit=True)  # a second start: the store has a run now
        assert len(s.list_runs()) == 1
    with Store(tmp_path / "ro.duckdb") as s:
        build_app(s, str(config_file), jobs=JobWorker(s, read_only=True), first_visit=True)
        assert s.list_runs() == []


def test_pages_count_what_the_team_has_reviewed(tmp_path):
    """The Pairs and Critic pages say "reviewed N of M by the team"; "Looks right" counts without changing data."""
    from studio import tab_critic, tab_pairs
    from studio.queue_lines import review_line
    from tests._store_world import IT, RUN, build_world

    with Store(tmp_path / "ws.duckdb") as s:
        build_world(s)
        assert review_line(s, RUN, IT, "pair") == " · reviewed 0 of 3 by the team"
        assert "“Looks right” recorded" in tab_pairs.pair_action(s, RUN, IT, "m2|0|0", "reviewed", "ann")
        tab_pairs.pair_action(s, RUN, IT, "m1|0|0", "swap", "bob")
        assert review_line(s, RUN, IT, "pair") == " · reviewed 2 of 3 by the team"
        assert "“Looks right” recorded" in tab_critic.verdict_action(s, RUN, IT, "q1|0|0", "reviewed", "ann")
        assert review_line(s, RUN, IT, "verdict") == " · reviewed 1 of 3 by the team"
        assert review_line(s, None, None, "pair") == ""


def test_the_run_tab_draws_the_iteration_as_a_pipeline_with_progress_and_eta(tmp_path):
    """Eight cards in MOAT order; a running stage's bar and ETA come from the job's events, a done one says its
    time and summary; without a live job a 'running' stage is interrupted."""
    import re

    from studio.pipeline import pipeline_html
    from tests._store_world import IT, RUN, build_world

    with Store(tmp_path / "ws.duckdb") as s:
        build_world(s)
        s.set_stage(RUN, IT, "pairs", "running")
        s.set_stage(RUN, IT, "pairs", "done", counts={"rows": 3, "groups": 3})
        s.set_stage(RUN, IT, "ground", "running")
        snap = {"events": [{"iteration": IT, "stage": "ground", "done": 24, "total": 96, "eta_s": 12.4}]}
        live = pipeline_html(s, RUN, snap, live=True)
        dead = pipeline_html(s, RUN, snap, live=False)
        empty = pipeline_html(s, None, {}, live=False)
    cards = re.findall(r'data-stage="([a-z_]+)" data-status="([a-z]+)"', live)
    assert [c[0] for c in cards] == ["sample", "score", "pairs", "train_planner", "ground", "critique",
                                     "train_grounder", "evaluate"]
    assert dict(cards)["pairs"] == "done" and dict(cards)["ground"] == "running" and dict(cards)["sample"] == "pending"
    assert "24/96 · ETA 12 s" in live and 'aria-valuenow="25"' in live
    assert "3 pairs from 3 tasks, median margin 0.70" in live and 'aria-valuenow="100"' in live
    assert 'data-stage="ground" data-status="interrupted"' in dead and "ETA" not in dead
    assert "start a new one" in empty


def test_a_reload_never_moves_a_pick_that_is_still_on_the_page():
    """studio.picks.pick_update: a reload in flight while the curator moved must not send the old pick back; a pick
    that left the page (new page, filter) becomes the page's first item, and an empty page clears it."""
    from studio.picks import pick_update

    labels, keys = [("A", "a"), ("B", "b")], ["a", "b"]
    assert "value" not in pick_update(labels, keys, "b") and pick_update(labels, keys, "b")["choices"] == labels
    assert pick_update(labels, keys, "z")["value"] == "a"
    assert pick_update(labels, keys, None)["value"] == "a"
    assert pick_update([], [], "a")["value"] is None


def test_pair_status_lines_name_the_pair_as_the_picker_does(store, run_id):
    """A status line says which pair by its question and plan numbers (as they are after the action), never by the
    task|step|pair_idx key; the table puts the short columns a curator decides by before the question."""
    from studio import tab_pairs

    df, _ = tab_pairs.pairs_table(store, run_id, 1)
    key, question, c, r = df["key"][0], df["question"][0], int(df["chosen_k"][0]), int(df["rejected_k"][0])
    line = tab_pairs.pair_action(store, run_id, 1, key, "swap", "alice")
    assert key not in line and "|" not in line
    assert line.startswith("“Swap” recorded for “" + tab_pairs.excerpt(question)[:30])
    assert f"plan {r} over {c}" in line and "alice" in line  # swapped: the rejected plan now wins
    assert f"plan {r} over {c}" in tab_pairs.pair_action(store, run_id, 1, key, "reviewed", "alice")  # swap stands
    columns = list(df.columns)
    assert columns[0] == "key" and len(tab_pairs.WIDTHS) == len(columns)
    assert columns.index("margin") < columns.index("question") > columns.index("override_action")


def test_a_decision_on_a_pair_another_curator_has_open_is_refused(store, run_id):
    """Two curators on one pair: the later decision replaced the earlier one and neither was told. The one who does
    not hold the pair is refused, naming who does; nothing is recorded; the holder acts as before."""
    import gradio as gr

    from engine.leases import LeaseBook
    from studio import tab_pairs
    from studio.common import Ctx

    ctx = Ctx(store=store, jobs=None, read_only=False, spaces=False, run=None, iteration=None, curator=None,
              leases=LeaseBook())
    key = tab_pairs.pairs_table(store, run_id, 1)[0]["key"][0]
    before = store.query("SELECT count(*) AS n FROM overrides")["n"][0]
    assert ctx.leases.claim(("pair", run_id, 1), key, "ann") is None
    with pytest.raises(gr.Error, match="ann has this pair open right now"):
        tab_pairs.action_handler(ctx, "swap")(run_id, 1, key, "bob", None, None, "", None)
    assert store.query("SELECT count(*) AS n FROM overrides")["n"][0] == before
    assert "recorded" in tab_pairs.action_handler(ctx, "swap")(run_id, 1, key, "ann", None, None, "", None)
    assert "· in training · swap by ann</p>" in tab_pairs.pair_detail(store, run_id, 1, key)[0]  # who set it
    ctx.leases.claim(("pair", run_id, 1), key, "ann")
    tab_pairs.action_handler(ctx, "tie")(run_id, 1, key, "ann", None, None, "", None)
    assert "· tie by ann</p>" in tab_pairs.pair_detail(store, run_id, 1, key)[0]  # the flag once, not "tie · tie"
    assert ctx.leases.claim(("pair", run_id, 1), "other|0|0", "ann") is None  # ann moves on: bob may act
    assert "recorded" in tab_pairs.action_handler(ctx, "reviewed")(run_id, 1, key, "bob", None, None, "", None)


def test_a_decision_takes_the_hold_so_after_a_lapse_the_later_decision_is_refused(store, run_id):
    """A hold lapses 90 s after opening; a decision takes it anew, so of two curators acting on one pair after a
    lapse the first holds it and the second is refused (both were accepted, the second replacing the first). A
    curator who corrects their name gives up what the old name held."""
    import gradio as gr

    from engine.leases import LeaseBook
    from studio import tab_pairs
    from studio.common import Ctx, claim_note

    now = [0.0]
    ctx = Ctx(store=store, jobs=None, read_only=False, spaces=False, run=None, iteration=None, curator=None,
              leases=LeaseBook(ttl_s=90, clock=lambda: now[0]))
    key = tab_pairs.pairs_table(store, run_id, 1)[0]["key"][1]
    review = tab_pairs.action_handler(ctx, "reviewed")
    assert claim_note(ctx, "pair", run_id, 1, key, "ann", None) == ("", "ann")
    assert "**ann** has this pair open" in claim_note(ctx, "pair", run_id, 1, key, "bob", None)[0]
    now[0] = 95.0  # ann's hold lapsed while she read
    assert "recorded" in review(run_id, 1, key, "bob", None, None, "", None)  # bob acts first: he holds it now
    now[0] = 100.0
    with pytest.raises(gr.Error, match="bob has this pair open right now"):
        review(run_id, 1, key, "ann", None, None, "", None)
    now[0] = 150.0
    assert "recorded" in review(run_id, 1, key, "bob", None, None, "", None)  # and each decision renews his hold
    now[0] = 200.0  # 105 s after bob opened it, 50 s after his last decision
    with pytest.raises(gr.Error, match="bob has this pair open"):
        review(run_id, 1, key, "ann", None, None, "", None)
    # bob was "bbo" a moment ago: the old name's hold is dropped when the session's name changes
    assert claim_note(ctx, "pair", run_id, 1, "x|0|0", "bbo", None) == ("", "bbo")
    assert claim_note(ctx, "pair", run_id, 1, "x|0|0", "bob2", "bbo") == ("", "bob2")


def test_a_users_mistake_shows_its_message_as_is_without_a_traceback(store, run_id):
    """No curator name, a bad plan choice, nothing to undo: the page shows the message itself (not "'...'", the repr
    a gr.Error re-wrapped in another gr.Error gave) and the server log gets no traceback (print_exception off)."""
    import gradio as gr
    from gradio.utils import error_payload

    from studio import tab_pairs
    from studio.common import Ctx
    from studio.keys import undo_handler

    ctx = Ctx(store=store, jobs=None, read_only=False, spaces=False, run=None, iteration=None, curator=None)
    key = tab_pairs.pairs_table(store, run_id, 1)[0]["key"][0]
    ks = sorted(int(k) for k in store.task_plans(run_id, 1, key.split("|")[0])["k"])
    calls = {"no name": lambda: tab_pairs.action_handler(ctx, "swap")(run_id, 1, key, "", None, None, "", None),
             "same plan twice": lambda: tab_pairs.action_handler(ctx, "choose")(run_id, 1, key, "bob", ks[0], ks[0],
                                                                                 "", None),
             "no pair": lambda: tab_pairs.action_handler(ctx, "tie")(run_id, 1, None, "bob", None, None, "", None),
             "undo, no name": lambda: undo_handler(ctx, tab_pairs.undo_message)(run_id, 1, "", None),
             "nothing to undo": lambda: undo_handler(ctx, tab_pairs.undo_message)(run_id, 1, "nobody", None)}
    seen = {}
    for what, call in calls.items():
        with pytest.raises(gr.Error) as err:
            call()
        shown = error_payload(err.value, False)["error"]  # what Gradio sends to the page
        assert shown and shown[0] not in "'\"" and not err.value.print_exception, (what, shown)
        seen[what] = shown
    assert seen["no name"].startswith("Enter your curator name") and seen["undo, no name"] == seen["no name"]
    assert seen["no pair"] == "Pick a pair first." and seen["nothing to undo"].startswith("nobody has nothing")
    assert store.query("SELECT count(*) AS n FROM overrides")["n"][0] == 0  # and nothing was recorded
