"""``engine.breakdown``: an experiment's evaluation traces grouped by template, checked against a hand count on a
hand-written store, and its CLI (``report --by-template``)."""

from __future__ import annotations

import json

import pytest

from engine.__main__ import main
from engine.breakdown import breakdown_markdown, template_breakdown
from engine.report import UnknownExperiment
from engine.store import Store
from engine.tasks import Task

RENDERINGS = [["Answer in which city the person was born.", "Answer in which city Ka Lo was born.", "Look it up."],
              ["Answer which river that city is on.", "Answer which river that city is on.", "Look up the next fact."]]
SOUND = ["Answer in which city Ka Lo was born.", "Answer which river that city is on."]
WRONG_HOP = ["Answer in which city the company is based.", "Answer which river that city is on."]
VAGUE = ["Look it up.", "Look up the next fact."]  # sound to the critic, useless to the grounder
HALF_VAGUE = ["Answer in which city Ka Lo was born.", "Look up the next fact."]


def _task(i: int, template: str | None, domain: str = "qa") -> Task:
    meta = {"template": template, "step_renderings": RENDERINGS, "vague_subgoals": VAGUE} if template else {}
    return Task(id=f"t{i}", domain=domain, source=f"demo:{domain}", split="held_out", question=f"q{i}",
                gold_subgoals=[r[0] for r in RENDERINGS], gold_actions=["R1 = A()", "R2 = B()"], answer="x", meta=meta)


TASKS = [_task(0, "born_in-river_of"), _task(1, "born_in-river_of"), _task(2, None, "maths")]
# (seed, iteration) -> per task: (plan subgoals, correct, gold log-PPL)
TRACES = {
    (1, 0): [(WRONG_HOP, False, 0.6), (SOUND, True, 0.2), (SOUND[:1], False, 0.9)],
    (1, 1): [(HALF_VAGUE, True, 0.1), (SOUND, True, 0.3), (SOUND, True, 0.5)],
    (2, 0): [(WRONG_HOP, False, 0.8), (VAGUE, False, 0.4), (SOUND, True, 0.7)],
    (2, 1): [(SOUND, False, 0.2), (WRONG_HOP, True, 0.4), (SOUND, False, None)],
}


@pytest.fixture
def traced_store(tmp_path):
    with Store(tmp_path / "traces.duckdb") as store:
        store.write("experiments", [{"experiment_id": "ex-1", "name": "ex", "source": "ex.toml",
                                     "config_json": {"variants": {"full": []}, "seeds": [1, 2], "iterations": 1}}])
        for seed in (1, 2):
            run_id = store.create_run(f"ex/full/s{seed}", {}, tmp_path)
            store.write("experiment_runs", [{"experiment_id": "ex-1", "variant": "full", "seed": seed,
                                             "run_id": run_id}])
            store.put_tasks(run_id, TASKS)
            for t in (0, 1):
                store.write("eval_traces", [
                    {"run_id": run_id, "iteration": t, "task_id": task.id, "split": "held_out", "domain": task.domain,
                     "plan": "; ".join(plan), "actions": "", "answer": None, "correct": ok, "gold_logppl": lp,
                     "trace_json": json.dumps({"subgoals": plan})}
                    for task, (plan, ok, lp) in zip(TASKS, TRACES[(seed, t)])])
        yield store


def test_groups_equal_a_hand_count(traced_store):
    out = template_breakdown(traced_store, "ex-1")
    groups = out["variants"]["full"]["groups"]
    assert list(groups) == ["demo:maths", "born_in-river_of"]  # no template: the source; ordered by domain
    qa = groups["born_in-river_of"]
    assert (qa["domain"], qa["tasks"]) == ("qa", 2)
    it0, it1 = qa["iterations"]["0"], qa["iterations"]["1"]
    assert it0["accuracy"]["per_seed"] == {"1": 0.5, "2": 0.0} and it0["accuracy"]["mean"] == pytest.approx(0.25)
    assert it0["sound_plans"]["per_seed"] == {"1": 0.5, "2": 0.5}  # the wrong first hop is not sound, vague is
    assert it1["sound_plans"]["per_seed"] == {"1": 1.0, "2": 0.5}
    assert it0["vague_plans"]["per_seed"] == {"1": 0.0, "2": 0.5}  # a plan with one vague step counts too
    assert it1["vague_plans"]["per_seed"] == {"1": 0.5, "2": 0.0}
    assert it0["gold_logppl"]["per_seed"] == {"1": pytest.approx(0.4), "2": pytest.approx(0.6)}
    maths = groups["demo:maths"]["iterations"]
    # Without renderings only the step count is checked; a missing log-PPL is left out, not counted as 0.
    assert maths["0"]["sound_plans"]["per_seed"] == {"1": 0.0, "2": 1.0}
    assert maths["1"]["gold_logppl"]["per_seed"] == {"1": pytest.approx(0.5)}
    assert maths["0"]["vague_plans"]["per_seed"] == {"1": 0.0, "2": 0.0}  # no vague renderings listed: never vague
    text = breakdown_markdown(out)
    assert "| born_in-river_of | qa | 2 | 25.0 " in text and "*full* (iteration 0 -> 1)" in text
    json.dumps(out, allow_nan=False)
    with pytest.raises(UnknownExperiment):
        template_breakdown(traced_store, "ex-nope")
    assert template_breakdown(traced_store, "ex-1", split="dev")["variants"] == {}


def test_report_by_template_cli(traced_store, capsys):
    db = traced_store.path
    traced_store.close()
    assert main(["report", "--db", str(db), "--experiment", "ex-1", "--by-template", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["split"] == "held_out" and set(out["variants"]["full"]["groups"]) == {"demo:maths", "born_in-river_of"}
    assert main(["report", "--db", str(db), "--experiment", "ex-1", "--by-template"]) == 0
    assert capsys.readouterr().out.startswith("**held_out by template**")
    assert main(["report", "--db", str(db), "--experiment", "ex-nope", "--by-template"]) == 2
    assert "no experiment 'ex-nope'" in capsys.readouterr().err
    # a split the runs never evaluated is refused, naming the ones they did (a bare header read like a result)
    assert main(["report", "--db", str(db), "--experiment", "ex-1", "--by-template", "--split", "dev"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "experiment ex-1 never evaluated dev (its runs evaluated held_out" in captured.err


def test_report_split_without_by_template_is_refused(traced_store, capsys):
    db = traced_store.path
    traced_store.close()
    assert main(["report", "--db", str(db), "--experiment", "ex-1", "--split", "held_in", "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "--split held_in needs --by-template" in captured.err
    assert main(["report", "--db", str(db), "--experiment", "ex-1", "--by-template", "--split", "held_out",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["split"] == "held_out"


def test_a_vague_wording_that_is_also_the_concrete_one_is_not_vague():
    from engine.breakdown import has_vague_step

    task = Task(id="t", domain="maths", source="demo:maths", split="dev", question="q",
                gold_subgoals=["Find the books.", "Update the count."],
                meta={"vague_subgoals": ["Find the books.", "Update the count."]})
    assert not has_vague_step(task, ["Find the books.", "Update the count."])
    task.gold_subgoals = ["Multiply the jars by the books.", "Update the count."]
    assert has_vague_step(task, ["Find the books.", "Update the count."])
    assert not has_vague_step(task, ["Multiply the jars by the books.", "Update the count.", "Find the books."])

