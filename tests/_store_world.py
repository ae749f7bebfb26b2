"""A tiny hand-made MOAT iteration written straight into a Store (no models): tasks, plans, scores, pairs,
groundings and verdicts for three tasks. Shared by test_curation.py and test_export.py (``build_world``) and by the
studio tests that call the studio's handlers on it (the fixture helpers below).

Iteration 0 of run ``RUN``:
* m1 (maths): 4 plans, k=2 repeats k=0's text; logppl k0=0.5 k1=1.5 k2=0.5 k3=2.0 -> auto pair (0, 3), margin 1.5.
  Grounding of k0 is correct; the critic accepted it.
* m2 (maths): 2 plans, logppl 0.8 / 1.1 -> auto pair (0, 1), margin 0.3. Grounding of k0 is wrong; the critic
  corrected it (new subgoals and actions).
* q1 (qa): 2 plans, logppl 0.2 / 0.9 -> auto pair (0, 1), margin 0.7. The critic found k0 unfixable.

Fixture helpers, so that a test module's fixture is a one-line call (the fixtures themselves stay in the modules):
* ``world_store(tmp_path)``: the world in a new Store at ``tmp_path/ws.duckdb``, closed after the test; a fixture's
  body is ``yield from world_store(tmp_path)`` (the ``store`` fixtures of test_curation.py, test_export.py,
  test_pair_view.py, test_critic_ux.py, test_studio_live_views.py, test_studio_identity.py, test_studio_pairs_ux.py
  and test_studio_curation_detail.py, the ``world`` fixtures of test_studio_pace.py and test_studio_run_ux.py).
* ``studio_fns(store)``: the studio app built on ``store`` (examples/demo.toml), its event functions by endpoint
  name, as the page's events call them: ``fns["pairs_search"].fn(...)``, ``.outputs``, ``.targets`` (the ``fns``
  fixtures of test_studio_live_views.py and test_studio_pairs_ux.py). ``app_fns(demo)`` does the same for an app
  built otherwise (test_studio_identity.py's, which has viewers).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from engine.prompts import planner_messages, render_chat
from engine.store import Store
from engine.tasks import Task

RUN = "world-run"
IT = 0

TASKS = [
    Task(
        id="m1",
        domain="maths",
        source="test",
        split="train",
        question="Tom has 3 bags of 4 apples and buys 5 more. How many apples?",
        gold_subgoals=["Multiply 3 by 4.", "Add 5."],
        gold_actions=["R1 = Calculator(3*4)", "R2 = Calculator(R1+5)"],
        answer="17",
    ),
    Task(
        id="m2",
        domain="maths",
        source="test",
        split="train",
        question="What is 10 minus 4, doubled?",
        gold_subgoals=["Subtract 4 from 10.", "Double it."],
        gold_actions=["R1 = Calculator(10-4)", "R2 = Calculator(R1*2)"],
        answer="12",
    ),
    Task(
        id="q1",
        domain="qa",
        source="test",
        split="train",
        question="Where was Ada Lovelace born?",
        context=["Ada Lovelace: Ada Lovelace was born in London in 1815."],
        gold_subgoals=["Find where Ada Lovelace was born."],
        gold_actions=["R1 = KnowledgeQuery(Ada Lovelace); R2 = QA([R1], Where was Ada Lovelace born?)"],
        answer="London",
    ),
]

PLAN_TEXTS = {
    "m1": [
        "Subgoal 1: Multiply 3 by 4.; Subgoal 2: Add 5.",
        "Subgoal 1: Add 3 and 4.",
        "Subgoal 1: Multiply 3 by 4.; Subgoal 2: Add 5.",
        "Subgoal 1: Guess.",
    ],
    "m2": ["Subgoal 1: Subtract 4 from 10.", "Subgoal 1: Add 10 and 4."],
    "q1": ["Subgoal 1: Find where Ada Lovelace was born.", "Subgoal 1: Ask someone."],
}
LOGPPL = {"m1": [0.5, 1.5, 0.5, 2.0], "m2": [0.8, 1.1], "q1": [0.2, 0.9]}
AUTO = {"m1": (0, 3), "m2": (0, 1), "q1": (0, 1)}


def _subgoals(text: str) -> list[str]:
    return [part.split(": ", 1)[1] for part in text.split("; ")]


def prompt_of(task: Task) -> str:
    return render_chat(planner_messages(task), add_generation_prompt=True)


def auto_pair_rows() -> list[dict]:
    rows = []
    for tid, (c, r) in AUTO.items():
        lc, lr = LOGPPL[tid][c], LOGPPL[tid][r]
        rows.append(
            dict(
                run_id=RUN,
                iteration=IT,
                task_id=tid,
                step=0,
                pair_idx=0,
                chosen_k=c,
                rejected_k=r,
                chosen_logppl=lc,
                rejected_logppl=lr,
                margin=lr - lc,
                rule="best_worst",
            )
        )
    return rows


def build_world(store: Store) -> None:
    store.write("runs", [{"run_id": RUN, "name": "world", "config_json": {}, "run_dir": "runs/world"}])
    store.put_tasks(RUN, TASKS)
    by_id = {t.id: t for t in TASKS}
    plans, scores = [], []
    for tid, texts in PLAN_TEXTS.items():
        for k, text in enumerate(texts):
            plans.append(
                dict(
                    run_id=RUN,
                    iteration=IT,
                    task_id=tid,
                    step=0,
                    k=k,
                    prompt=prompt_of(by_id[tid]),
                    text=text,
                    subgoals_json=_subgoals(text),
                    well_formed=True,
                )
            )
            lp = LOGPPL[tid][k]
            scores.append(
                dict(run_id=RUN, iteration=IT, task_id=tid, step=0, k=k, logppl=lp, ppl=2.718**lp, n_tokens=10)
            )
    g = dict(run_id=RUN, iteration=IT, step=0, k=0, prompt="p", values_json={}, answer=None, error=None)
    groundings = [
        {**g, "task_id": "m1", "actions": "R1 = Calculator(3*4); R2 = Calculator(R1+5)", "ok": True, "correct": True},
        {**g, "task_id": "m2", "actions": "R1 = Calculator(10+4)", "ok": True, "correct": False},
        {**g, "task_id": "q1", "actions": "R1 = Ask(someone)", "ok": False, "correct": False},
    ]
    v = dict(
        run_id=RUN,
        iteration=IT,
        step=0,
        k=0,
        backend="reference",
        model=None,
        reference_guided=True,
        raw="",
        corrected_subgoals_json=None,
        corrected_actions=None,
    )
    verdicts = [
        {**v, "task_id": "m1", "status": "accepted"},
        {
            **v,
            "task_id": "m2",
            "status": "corrected",
            "corrected_subgoals_json": ["Subtract 4 from 10.", "Double it."],
            "corrected_actions": "R1 = Calculator(10-4); R2 = Calculator(R1*2)",
        },
        {**v, "task_id": "q1", "status": "unfixable"},
    ]
    store.write_batch(
        [
            ("plans", plans),
            ("scores", scores),
            ("pairs", auto_pair_rows()),
            ("groundings", groundings),
            ("verdicts", verdicts),
        ]
    )


def add_iterative_step(store: Store, step: int = 2) -> None:
    """Step ``step`` of m1 as an iterative run writes it: one candidate (k=0) for the gold subgoal, grounded with
    actions that read ``R1`` from the gold history, and a critic correction of them."""
    task = TASKS[0]
    subgoal = task.gold_subgoals[step - 1]
    key = dict(run_id=RUN, iteration=IT, task_id=task.id, step=step, k=0)
    store.write_batch([
        ("plans", [{**key, "prompt": "p", "text": f"Subgoal {step}: {subgoal}", "subgoals_json": [subgoal],
                    "well_formed": True}]),
        ("scores", [{**key, "logppl": 0.4, "ppl": 1.5, "n_tokens": 6}]),
        ("groundings", [{**key, "prompt": "p", "actions": "R2 = Calculator(R1+4)", "values_json": {}, "answer": None,
                         "error": None, "ok": True, "correct": False}]),
        ("verdicts", [{**key, "backend": "reference", "model": None, "reference_guided": True, "raw": "",
                       "status": "corrected", "corrected_subgoals_json": None,
                       "corrected_actions": task.gold_actions[step - 1]}]),
    ])


def world_store(tmp_path: Path) -> Iterator[Store]:
    """The world built into a new Store at ``tmp_path/ws.duckdb``, yielded once and closed after: a pytest fixture's
    body is ``yield from world_store(tmp_path)``."""
    with Store(tmp_path / "ws.duckdb") as store:
        build_world(store)
        yield store


def app_fns(demo) -> dict:
    """A built studio app's event functions (gradio ``BlockFunction``s) by endpoint name; those without one are
    left out."""
    return {f.api_name: f for f in demo.fns.values() if f.api_name}


def studio_fns(store: Store) -> dict:
    """``app_fns`` of the studio app built on ``store`` with examples/demo.toml and no other option (no viewers,
    writable)."""
    from studio.app import build_app

    return app_fns(build_app(store, "examples/demo.toml"))
