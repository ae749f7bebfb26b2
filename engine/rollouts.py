"""Reading the GRPO rollouts a run stored (``stages.planner_objective`` or ``grounder_objective = grpo``, written by
engine/stages/train_grpo.py); ``role`` picks the planner's (plans, the default) or the grounder's (action
sequences).

``task_group(store, run_id, iteration, task_id)`` returns the rollouts of one task, best advantage first, each with
its named rewards decoded: the studio shows them beside the task's DPO pair (same task, same iteration).
``rollout_summary(store, run_id, iteration)`` counts them: rollouts, groups, mean weighted reward, the groups whose
advantages were all zero (a reward that did not vary within the group teaches nothing) and each reward's mean.
"""

from __future__ import annotations

import json
from typing import Any

from engine.store import Store


def task_group(store: Store, run_id: str, iteration: int, task_id: str, role: str = "planner"
               ) -> list[dict[str, Any]]:
    frame = store.query("SELECT batch, n, prompt, text, rewards_json, reward, advantage FROM rollouts WHERE "
                        "run_id = ? AND iteration = ? AND task_id = ? AND role = ? ORDER BY advantage DESC, batch, n",
                        [run_id, int(iteration), task_id, role])
    return [{"batch": int(r.batch), "n": int(r.n), "prompt": r.prompt, "text": r.text,
             "rewards": json.loads(r.rewards_json),
             "reward": None if r.reward != r.reward else float(r.reward), "advantage": float(r.advantage)}
            for r in frame.itertuples(index=False)]


def rollout_summary(store: Store, run_id: str, iteration: int, role: str = "planner") -> dict[str, Any]:
    frame = store.query("SELECT batch, task_id, rewards_json, reward, advantage FROM rollouts WHERE run_id = ? AND "
                        "iteration = ? AND role = ?", [run_id, int(iteration), role])
    if frame.empty:
        return {"rollouts": 0}
    groups = frame.groupby(["batch", "task_id"])["advantage"]
    per_reward: dict[str, list[float]] = {}
    for text in frame["rewards_json"]:
        for name, value in json.loads(text).items():
            if value is not None:
                per_reward.setdefault(name, []).append(float(value))
    return {"rollouts": len(frame), "groups": groups.ngroups, "mean_reward": float(frame["reward"].mean()),
            "flat_groups": int(groups.apply(lambda a: bool((a == 0).all())).sum()),
            "reward_means": {name: sum(v) / len(v) for name, v in per_reward.items()}}
