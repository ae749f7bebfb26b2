"""A hand-made experiment written straight into a Store (no models), for the Metrics tab's tests.

Experiment ``EXP`` ("abl"): variants ``full`` (the baseline) and ``no_stage1`` x seeds 11, 12 x iterations 0..2,
each (variant, seed) an ordinary run ``abl/<variant>/s<seed>`` with done evaluate stages and, per iteration,
``metrics`` rows for held-in and held-out ("all", and maths/qa on held-out): accuracy (``HELD_IN``/``HELD_OUT``;
maths = +0.1, qa = -0.1), its Wilson interval and counts out of ``N``, and the gap PPL ``GAP`` (and its log).

``SWAP_RUN`` (full, seed 11) also has a stored swap table: cells ``SWAP_CORRECT[(planner_after, grounder_after)]``
= correct out of ``SWAP_N`` per held-out domain (maths, qa; "all" is their sum), McNemar rows ``SWAP_TESTS`` on the
non-base cells, and ``eval_traces`` of iterations 0..2 on held-in tasks h1..h6 and held-out tasks o1..o4
(``TRACES``; o4 is missing from iteration 2). Its tasks are stored with a demo-world template each (``TEMPLATES``), so
the per-template view has groups: per template, iteration 0 -> 2 held-out accuracy is tpl-a 50 -> 100%, tpl-b
50 -> 100% (o4's missing trace is not counted).
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from engine.stats import wilson
from engine.store import Store
from engine.tasks import Task

EXP = "abl-0000beef"
VARIANTS = ("full", "no_stage1")
SEEDS = (11, 12)
N = 100
HELD_IN = {("full", 11): [0.50, 0.60, 0.70], ("full", 12): [0.52, 0.58, 0.74],
           ("no_stage1", 11): [0.50, 0.55, 0.57], ("no_stage1", 12): [0.52, 0.54, 0.60]}
HELD_OUT = {("full", 11): [0.30, 0.36, 0.40], ("full", 12): [0.34, 0.38, 0.46],
            ("no_stage1", 11): [0.30, 0.31, 0.33], ("no_stage1", 12): [0.34, 0.33, 0.36]}
GAP = {("full", 11): [3.0, 2.6, 2.2], ("full", 12): [3.2, 2.7, 2.1],
       ("no_stage1", 11): [3.0, 2.9, 2.9], ("no_stage1", 12): [3.2, 3.1, 3.0]}


def run_of(variant: str, seed: int) -> str:
    return f"abl/{variant}/s{seed}"


SWAP_RUN = run_of("full", 11)
SWAP_N = 10
# (planner_after, grounder_after) -> (maths correct, qa correct) of SWAP_N each; -1 = gold plans
SWAP_CORRECT = {(0, 0): (3, 2), (2, 0): (5, 2), (0, 2): (4, 3), (2, 2): (7, 4), (-1, 0): (6, 5), (-1, 2): (9, 6)}
# cell -> domain -> (gained, lost, p) against the base cell
SWAP_TESTS = {(2, 0): {"maths": (3, 1, 0.625), "qa": (1, 1, 1.0), "all": (4, 2, 0.6875)},
              (0, 2): {"maths": (2, 1, 1.0), "qa": (1, 0, 1.0), "all": (3, 1, 0.625)},
              (2, 2): {"maths": (4, 0, 0.125), "qa": (2, 0, 0.5), "all": (6, 0, 0.03125)},
              (-1, 2): {"maths": (3, 0, 0.25), "qa": (1, 0, 1.0), "all": (4, 0, 0.125)}}
# iteration -> task -> correct
TRACES = {
    0: {"h1": 0, "h2": 0, "h3": 0, "h4": 1, "h5": 1, "h6": 0, "o1": 1, "o2": 0, "o3": 0, "o4": 1},
    1: {"h1": 1, "h2": 1, "h3": 1, "h4": 1, "h5": 1, "h6": 0, "o1": 0, "o2": 1, "o3": 0, "o4": 1},
    2: {"h1": 1, "h2": 0, "h3": 1, "h4": 0, "h5": 1, "h6": 1, "o1": 1, "o2": 1, "o3": 1},
}


TEMPLATES = {"h1": "tpl-a", "h2": "tpl-a", "h3": "tpl-a", "h4": "tpl-b", "h5": "tpl-b", "h6": "tpl-b",
             "o1": "tpl-a", "o2": "tpl-a", "o3": "tpl-b", "o4": "tpl-b"}


def _tasks() -> list[Task]:
    return [Task(id=task, domain="maths", source="demo:maths", split="held_in" if task[0] == "h" else "held_out",
                 question=f"question {task}", gold_subgoals=["Add the pens."], gold_actions=["R1 = Calculator(1+1)"],
                 answer="2", meta={"template": template}) for task, template in TEMPLATES.items()]


def _metrics(variant: str, seed: int, t: int) -> list[dict]:
    rows = []
    for split, acc in (("held_in", HELD_IN[variant, seed][t]), ("held_out", HELD_OUT[variant, seed][t])):
        domains = {"all": acc} if split == "held_in" else {"all": acc, "maths": acc + 0.1, "qa": acc - 0.1}
        for domain, value in domains.items():
            correct = round(value * N)
            lo, hi = wilson(correct, N)
            rows += [{"split": split, "domain": domain, "name": name, "value": v} for name, v in (
                ("accuracy", correct / N), ("accuracy_lo", lo), ("accuracy_hi", hi), ("n", N), ("correct", correct))]
        gap = GAP[variant, seed][t] * (1.0 if split == "held_out" else 0.8)
        rows += [{"split": split, "domain": "all", "name": "gap_ppl", "value": gap},
                 {"split": split, "domain": "all", "name": "gap_logppl", "value": math.log(gap)}]
    return rows


def _swap_rows() -> list[dict]:
    rows = []
    for (a, b), (maths, qa) in SWAP_CORRECT.items():
        for domain, correct, n in (("maths", maths, SWAP_N), ("qa", qa, SWAP_N), ("all", maths + qa, 2 * SWAP_N)):
            lo, hi = wilson(correct, n)
            values = {"accuracy": correct / n, "accuracy_lo": lo, "accuracy_hi": hi, "n": n, "correct": correct}
            if (a, b) in SWAP_TESTS:
                gained, lost, p = SWAP_TESTS[a, b][domain]
                values.update(mcnemar_gained=gained, mcnemar_lost=lost, mcnemar_p=p)
            rows += [{"run_id": SWAP_RUN, "planner_after": a, "grounder_after": b, "split": "held_out",
                      "domain": domain, "name": name, "value": float(v)} for name, v in values.items()]
    return rows


def _trace_rows() -> list[dict]:
    return [{"run_id": SWAP_RUN, "iteration": t, "task_id": task, "split": "held_in" if task[0] == "h" else "held_out",
             "domain": "maths", "plan": "", "actions": "", "answer": None, "correct": bool(c), "gold_logppl": None,
             "trace_json": {}} for t, tasks in TRACES.items() for task, c in tasks.items()]


def build_experiment(store: Store) -> None:
    start = datetime(2026, 1, 1, 12, 0, 0)
    store.write("experiments", [{"experiment_id": EXP, "name": "abl", "source": "abl.toml", "config_json": {
        "variants": {"full": [], "no_stage1": ["stages.stage1=false"]}, "seeds": list(SEEDS), "iterations": 2,
        "baseline": "full"}}])
    for seed in SEEDS:
        for variant in VARIANTS:
            run_id = run_of(variant, seed)
            store.write("runs", [{"run_id": run_id, "name": run_id, "config_json": {}, "run_dir": "runs"}])
            store.write("experiment_runs", [{"experiment_id": EXP, "variant": variant, "seed": seed,
                                             "run_id": run_id}])
            for t in range(3):
                store.put_metrics(run_id, t, _metrics(variant, seed, t))
                store.write("stages", [{"run_id": run_id, "iteration": t, "stage": "evaluate", "status": "done",
                                        "started_at": start, "finished_at": start + timedelta(seconds=10)}])
    store.write_batch([("swaps", _swap_rows()), ("eval_traces", _trace_rows())])
    store.put_tasks(SWAP_RUN, _tasks())
