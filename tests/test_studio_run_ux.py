"""The Run and Metrics tabs say what a run did, by the run's own config (handler-level, no server, no models):

* every trainer label follows ``stages.planner_objective`` / ``grounder_objective`` (a GRPO run is never called DPO:
  pipeline cards, stage lines, Metrics titles, series and notes), and the Run tab's loss chart keeps the planner's
  and the grounder's losses apart;
* the Advanced box is the config of a NEW run (labelled so; it can start from the picked run's config);
* Validate's messages: plain text in the CLI box, the field named once, a TOML syntax error's line and column;
* the line that announced a job says how it ended once it has (the Run tab's timer);
* the tie rate has its own percent axis beside the pair count; the stage table's summary wraps.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine.store import Store
from tests._store_world import IT, RUN, world_store

GRPO_LOGS = [{"step": i, "loss": -0.2 + 0.05 * i, "reward": 0.5 + 0.1 * i, "reward_std": 0.3,
              "rewards/gap/mean": -0.3, "rewards/execution/mean": 0.5, "frac_reward_zero_std": 0.0} for i in (1, 2, 3)]


def _objectives(store: Store, planner: str = "dpo", grounder: str = "sft") -> None:
    """The world run, re-registered with these objectives (INSERT OR REPLACE on the run id)."""
    store.write("runs", [{"run_id": RUN, "name": "world", "run_dir": "runs/world",
                          "config_json": {"stages": {"planner_objective": planner, "grounder_objective": grounder}}}])


@pytest.fixture
def world(tmp_path):
    yield from world_store(tmp_path)


def _titles(html: str) -> list[str]:
    return re.findall(r'<div style="font-weight:600">([^<]*)</div>', html)


def _note(fig) -> str:
    return " ".join(a.text for a in fig.layout.annotations  # the note, not the "it N" marks; long notes wrap
                    if a.name != "iteration start").replace("<br>", " ")


# -- 1. labels follow the run's objectives --------------------------------------------------------------------------

def test_pipeline_cards_name_the_objective_the_run_trains_by(world):
    from studio.pipeline import pipeline_html

    world.set_stage(RUN, 1, "sample", "running")  # iteration 1 has begun: its eight MOAT cards are drawn
    world.set_stage(RUN, 1, "sample", "done", counts={"rows": 8})
    assert "4 · DPO planner" in _titles(pipeline_html(world, RUN, {}, live=False))  # the default config: DPO/SFT
    _objectives(world, "grpo", "grpo")
    titles = _titles(pipeline_html(world, RUN, {}, live=False))  # nothing trained yet: the config says
    assert "4 · GRPO planner" in titles and "7 · GRPO grounder" in titles, titles
    assert not any("DPO" in t or "SFT" in t for t in titles), titles
    # what the stage recorded it ran wins over the config
    _objectives(world, "dpo", "sft")
    for stage in ("train_planner", "train_grounder"):
        world.set_stage(RUN, 1, stage, "running")
        world.set_stage(RUN, 1, stage, "done", counts={"rows": 3, "rollouts": 24, "objective": "grpo"})
    page = pipeline_html(world, RUN, {}, live=False)
    assert {"4 · GRPO planner", "7 · GRPO grounder"} <= set(_titles(page))
    assert "GRPO on 3 tasks: 24 rollouts" in page and "GRPO on 3 grounded plans: 24 rollouts" in page


def test_stage_lines_say_pairs_do_not_train_a_grpo_planner(world):
    from studio.tab_run import stage_table

    world.set_stage(RUN, IT, "pairs", "running")
    world.set_stage(RUN, IT, "pairs", "done", counts={"rows": 3, "groups": 3})
    dpo = stage_table(world, RUN).set_index("stage").loc["pairs", "summary"]
    assert dpo == "3 pairs from 3 tasks, median margin 0.70 (of 3 task-steps)"
    _objectives(world, "grpo")
    world.set_stage(RUN, IT, "train_grounder", "running")
    world.set_stage(RUN, IT, "train_grounder", "done", counts={"rows": 480, "new_rows": 96, "original_rows": 384})
    table = stage_table(world, RUN).set_index("stage")
    assert table.loc["pairs", "summary"] == f"{dpo}; not trained on: the planner learns by GRPO"
    assert table.loc["train_grounder", "summary"] == "SFT on 480 rows (96 new + 384 original)"
    _objectives(world, "grpo", "grpo")  # a grounder by GRPO whose counts carry no objective: the config names it
    assert stage_table(world, RUN).set_index("stage").loc["train_grounder", "summary"].startswith("GRPO on 480")


def test_metrics_charts_of_a_grpo_run_never_say_dpo(world):
    from studio.tab_metrics import figures

    _objectives(world, "grpo", "grpo")
    world.add_train_logs(RUN, 1, "train_planner", GRPO_LOGS)
    world.add_train_logs(RUN, 1, "train_grounder", [{"step": i, "loss": 0.1 * i} for i in (1, 2)])
    figs = figures(world, RUN)
    assert figs["dpo_loss"].layout.title.text == "Planner GRPO loss"
    assert [t.name for t in figs["dpo_loss"].data] == ["GRPO loss"]
    assert figs["sft_loss"].layout.title.text == "Grounder GRPO loss"
    assert [t.name for t in figs["sft_loss"].data] == ["GRPO loss"]
    rewards = figs["dpo_rewards"]
    assert rewards.layout.title.text.startswith("GRPO rewards") and not _note(rewards)
    assert {t.name for t in rewards.data} == {"reward", "rewards/gap/mean", "rewards/execution/mean"}
    assert list(next(t for t in rewards.data if t.name == "reward").y) == pytest.approx([0.6, 0.7, 0.8])
    assert "not trained on: the planner learns by GRPO" in figs["pairs"].layout.title.text
    assert [t.name for t in figs["pairs"].data][0] == "pairs"
    for name in ("dpo_rewards", "dpo_loss", "sft_loss", "pairs"):
        fig = figs[name]
        shown = " ".join([fig.layout.title.text or "", _note(fig), *(t.name or "" for t in fig.data)])
        assert "DPO" not in shown and "SFT" not in shown, (name, shown)


def test_a_long_training_log_is_drawn_as_a_line_and_a_short_series_keeps_its_markers(world):
    """A GRPO run logs a reward per step: about 290 markers per series hid the lines. A series longer than
    ``MARKER_LIMIT`` points is a plain line; the per-iteration charts (a few points) keep their markers."""
    from studio.plots import MARKER_LIMIT
    from studio.tab_metrics import figures

    _objectives(world, "grpo", "grpo")
    steps = MARKER_LIMIT + 40
    world.add_train_logs(RUN, 1, "train_planner", [{"step": i, "loss": 1.0 / i, "reward": 0.01 * i,
                                                    "rewards/gap/mean": -0.01 * i} for i in range(1, steps + 1)])
    figs = figures(world, RUN)
    rewards = figs["dpo_rewards"]
    assert {t.name for t in rewards.data} == {"reward", "rewards/gap/mean"}
    assert all(len(t.y) == steps and t.mode == "lines" for t in rewards.data)
    assert [t.mode for t in figs["dpo_loss"].data] == ["lines"]
    assert figs["pairs"].data and all(t.mode == "lines+markers" for t in figs["pairs"].data)  # per iteration


def test_a_grpo_run_without_reward_logs_says_dpo_rewards_do_not_apply(world):
    from studio.tab_metrics import figures

    _objectives(world, "grpo")
    fresh = figures(world, RUN)  # nothing trained yet: the notes name the GRPO stage
    assert _note(fresh["dpo_loss"]) == "Nothing in this run yet: the planner's GRPO stage logs its loss"
    world.add_train_logs(RUN, 1, "train_planner", [{"step": 1, "loss": -0.1}])
    note = _note(figures(world, RUN)["dpo_rewards"])
    assert "trains its planner by GRPO" in note and "DPO rewards do not apply" in note
    assert "Nothing in this run yet" not in note


def test_a_dpo_run_keeps_its_dpo_labels(world):
    from studio.tab_metrics import figures

    world.add_train_logs(RUN, 1, "train_planner", [{"step": 1, "loss": 0.69, "rewards/margins": 0.1}])
    figs = figures(world, RUN)
    assert figs["dpo_loss"].layout.title.text == "Planner DPO loss"
    assert figs["dpo_rewards"].layout.title.text == "DPO rewards / margins / accuracies"
    assert figs["pairs"].layout.title.text == "Pairs in training and tie rate"
    assert "SFT stage" in _note(figs["sft_loss"])


def test_the_run_tabs_loss_chart_keeps_planner_and_grounder_apart(world):
    from studio.tab_run import loss_figure

    _objectives(world, "grpo")
    world.add_train_logs(RUN, 1, "train_planner", GRPO_LOGS)
    world.add_train_logs(RUN, 2, "train_planner", GRPO_LOGS)
    world.add_train_logs(RUN, 1, "train_grounder", [{"step": i, "loss": 0.03} for i in (1, 2)])
    fig = loss_figure(world, RUN)
    axes = {t.name: t.yaxis for t in fig.data}
    assert axes == {"planner · it 1 · GRPO": "y", "planner · it 2 · GRPO": "y", "grounder · it 1 · SFT": "y2"}
    # Each panel named by its role and objective above it; the axes only "loss", short enough for a phone's panel.
    assert [a.text for a in fig.layout.annotations] == ["planner loss (GRPO)", "grounder loss (SFT)"]
    assert fig.layout.yaxis.title.text == fig.layout.yaxis2.title.text == "loss"
    assert fig.layout.yaxis.domain != fig.layout.yaxis2.domain  # two panels, not two series on one axis
    colour = {t.name: t.line.color for t in fig.data}
    assert colour["planner · it 1 · GRPO"] == colour["grounder · it 1 · SFT"] != colour["planner · it 2 · GRPO"]


# -- 2. the Advanced box is a NEW run's config ----------------------------------------------------------------------

@pytest.fixture
def app(world):
    from studio.app import build_app

    demo = build_app(world, "examples/demo.toml")
    yield demo, {c["props"].get("elem_id"): c for c in demo.config["components"] if c.get("props", {}).get("elem_id")}
    demo.close()


def test_the_advanced_config_is_labelled_as_a_new_runs_and_loads_the_picked_runs(app, world):
    from studio.new_run_config import picked_config, validate_config

    demo, by_id = app
    assert by_id["run-advanced"]["props"]["label"] == "Advanced: config for a new run (TOML)"
    assert "new run" in by_id["run-config"]["props"]["label"]
    assert "run_config_from_picked" in {fn.api_name for fn in demo.fns.values()}
    _objectives(world, "grpo")
    toml, message = picked_config(world, RUN)
    config, error = validate_config(toml)
    assert error == "" and config.stages.planner_objective == "grpo"
    assert "new" in message and f"`{RUN}`" in message
    assert picked_config(world, None)[0] is None and picked_config(world, "no-such-run")[0] is None
    assert picked_config(world, RUN, spaces=True)[0] is None  # a Space starts new runs from the demo's config


# -- 3. validate messages -------------------------------------------------------------------------------------------

def test_validate_messages_name_the_problem_once_and_plainly():
    from studio.new_run_config import cli_command, validate_config

    text = Path("examples/demo.toml").read_text()
    bad_k = text.replace("k = 15", "k = 1")
    # The field and its line in the editor, found here by hand (a TOML syntax error names its line the same way).
    line = bad_k.splitlines().index("k = 1") + 1
    assert validate_config(bad_k)[1].startswith(f"**sample.k, line {line}**: must be >= 2")
    cli = cli_command("examples/demo.toml", bad_k)
    assert cli == f"# fix the config first: sample.k, line {line}: must be >= 2 (a pair needs two plans), got 1"
    assert "**" not in cli
    outside = text.replace('workdir = "runs"', 'workdir = "/tmp/moat-outside"')
    error = validate_config(outside, workspace=".")[1]
    assert error.startswith("**run.workdir, line ") and "**: must be inside the workspace" in error
    assert error.count("run.workdir") == 1
    syntax = validate_config(text + "\n[bogus\n")[1]
    line = len((text + "\n[bogus\n").splitlines())
    assert syntax == f"**TOML syntax, line {line}, column 7**: Expected ']' at the end of a table declaration"
    assert "**" not in cli_command("examples/demo.toml", text + "\n[bogus\n")
    assert validate_config(text + "\nx = ")[1].startswith("**TOML syntax, at the end of the config**")


# -- 4. the job's announcement follows the job ----------------------------------------------------------------------

def test_the_started_line_says_how_the_job_ended(world, app):
    from studio.jobs import JobWorker
    from studio.run_jobs import RUNNING_NOTE, settled_message

    created = f"Created run `{RUN}` (3 tasks). The starting agents' evaluation (iteration 0), then MOAT's first " \
              f"iteration, {RUNNING_NOTE}"
    jobs = JobWorker(world)
    assert settled_message(created, jobs.snapshot()) is None  # no job yet
    assert jobs.submit("start_new", RUN, lambda progress, stop: "done") is None
    assert jobs.wait(10)
    ended = settled_message(created, jobs.snapshot())
    assert ended.startswith(f"Created run `{RUN}` (3 tasks). The job `start_new` on `{RUN}` finished after")
    assert "running" not in ended
    assert settled_message("Not created: **sample.k**: must be >= 2", jobs.snapshot()) is None  # not about a job
    assert jobs.submit("next_stage", RUN, lambda progress, stop: "paused") is None  # run_loop after its one stage
    assert jobs.wait(10)
    assert settled_message(f"Started `next_stage` on `{RUN}`.", jobs.snapshot()).startswith(
        f"The job `next_stage` on `{RUN}` finished after")
    assert jobs.submit("next_stage", RUN, lambda progress, stop: "stopped") is None
    assert jobs.wait(10)
    assert settled_message(f"Started `next_stage` on `{RUN}`.", jobs.snapshot()).startswith(
        f"The job `next_stage` on `{RUN}` was stopped")
    assert settled_message(created, jobs.snapshot()) is None  # a newer job than the one it announced
    # the Run tab's timer runs it
    demo, by_id = app
    refresh = next(fn for fn in demo.fns.values() if fn.api_name == "run_refresh")
    message_id = by_id["run-message"]["id"]
    assert message_id in [b._id for b in refresh.inputs] and message_id in [b._id for b in refresh.outputs]


# -- 5. the tie rate on its own axis; 6. the stage table wraps -------------------------------------------------------

def test_the_tie_rate_has_its_own_percent_axis(world):
    from studio.tab_metrics import figures

    fig = figures(world, RUN)["pairs"]
    pairs, ties = fig.data
    assert pairs.yaxis in (None, "y") and ties.yaxis == "y2"
    assert fig.layout.yaxis2.overlaying == "y" and fig.layout.yaxis2.tickformat == ".0%"
    assert fig.layout.yaxis.title.text == "pairs" and fig.layout.yaxis2.title.text == "tie rate"


def test_the_stage_tables_summary_wraps(app):
    from studio.tab_run import STAGE_COLUMNS

    _, by_id = app
    props = by_id["run-stages"]["props"]
    assert props["wrap"] is True
    widths = dict(zip(STAGE_COLUMNS, props["column_widths"]))
    assert widths["summary"] == max(widths.values(), key=lambda w: float(w.rstrip("%")))



def test_the_curation_table_says_a_grpo_planners_pairs_trained_nothing(world):
    """The Pairs tab's "Curation per iteration" table: a DPO iteration not trained yet reads "not trained"; an
    iteration whose planner learns by GRPO says so instead (its pairs will never train it)."""
    from studio.tab_pairs import curation_markdown

    rows = [line for line in curation_markdown(world, RUN).splitlines() if line.startswith(f"| {IT} |")]
    assert rows and rows[0].rstrip(" |").endswith("not trained")
    _objectives(world, "grpo")
    rows = [line for line in curation_markdown(world, RUN).splitlines() if line.startswith(f"| {IT} |")]
    assert rows[0].rstrip(" |").endswith("no DPO: the planner learns by GRPO")
