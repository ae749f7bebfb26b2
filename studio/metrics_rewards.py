"""The Metrics tab's planner rewards chart: what the planner's trainer logged of its rewards, per logged step.

``draw_rewards(fig, logs, tag, dashed)`` adds one line per reward key a run's ``train_planner`` log rows carry
(``logs``: ``Store.train_log_rows`` with the step axis ``x``): DPO's rewards / margins (logit margins, on the left
axis) and ``rewards/accuracies``, the share of pairs whose chosen plan gets the higher reward, on a right-hand
percent axis of its own (``studio.plots.second_axis``; its line named "(right axis)"): a 0-1 share on the margins'
axis read as a margin of 1. GRPO's logs give the weighted total's mean (``reward``) and each reward function's
(``rewards/<name>/mean``). ``tag`` ("A " / "B ") and ``dashed`` tell two runs apart.

Each line breaks between iterations (a gap, ``studio.plots.iteration_gaps``): every iteration trains from its own
start (its first step's accuracy is 0%), and a line joined across them plunged from the last iteration's 100% as if
training had collapsed. The share axis spans 0-100% with a pad (``second_axis(..., whole_share=True)``): at exactly 0
a 0% point was cut in half by the plot's edge.
"""

from __future__ import annotations

import json
import re

import pandas as pd
import plotly.graph_objects as go

from studio.plots import iteration_gaps, line, second_axis

DPO_KEYS = ("rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies")
SHARE_KEYS = frozenset({"rewards/accuracies"})  # a 0-1 share of pairs, beside logit rewards: drawn on a % axis
SHARE_AXIS = "share of pairs ranked right"  # the right axis' title
# What TRL's GRPOTrainer logs of its rewards: the weighted total's mean, and each reward function's mean.
GRPO_KEY = re.compile(r"^(reward|rewards/[^/]+/mean)$")


def reward_keys(logs: list[dict]) -> list[str]:
    """The rewards a planner's logs carry, DPO's first (in ``DPO_KEYS`` order), then GRPO's in logged order."""
    seen = dict.fromkeys(key for lg in logs for key in lg)
    return [k for k in DPO_KEYS if k in seen] + [k for k in seen if GRPO_KEY.match(k)]


def draw_rewards(fig: go.Figure, logs: pd.DataFrame, tag: str = "", dashed: bool = False) -> None:
    """One line per reward key of ``logs`` (see the module docstring); the share axis added with its line."""
    rows = [json.loads(t) for t in logs["logs_json"]]
    for key in reward_keys(rows):
        points = [(x, lg[key], it) for x, lg, it in zip(logs["x"], rows, logs["iteration"])
                  if isinstance(lg.get(key), (int, float))]
        if not points:
            continue
        points = iteration_gaps(points)
        share = key in SHARE_KEYS
        if share:  # (again for run B: the same settings)
            second_axis(fig, SHARE_AXIS, percent=True, whole_share=True)
        line(fig, *zip(*points), f"{tag}{key}{' (right axis)' if share else ''}", dashed=dashed,
             yaxis="y2" if share else None)
