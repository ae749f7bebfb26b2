"""A GRPO group as HTML: the rollouts the trainer sampled for one prompt, best advantage first, with each named
reward, so a group reads beside a DPO pair (Pairs tab, the planner's groups) or a task's plans (Plans tab, the
grounder's groups, one per grounded plan). Renders what ``engine.rollouts`` reads; computes nothing."""

from __future__ import annotations

import html
from typing import Any

from studio.render import pre


def group_table(rows: list[dict[str, Any]], what: str) -> str:
    """``rows`` (``engine.rollouts.task_group``) as one table; ``what`` names the completion column."""
    names = list(rows[0]["rewards"]) if rows else []
    head = "".join(f"<th>{html.escape(n)}</th>" for n in ["advantage", "reward", *names, what])

    def cell(value) -> str:
        return "<td>–</td>" if value is None else f"<td>{value:.3f}</td>"

    body = "".join("<tr>" + cell(r["advantage"]) + cell(r["reward"]) + "".join(cell(r["rewards"][n]) for n in names)
                   + f"<td>{pre(r['text'])}</td></tr>" for r in rows)
    return f"<table class='moat-group'><tr>{head}</tr>{body}</table>"


def grounder_groups(rows: list[dict[str, Any]]) -> str:
    """The grounder's rollouts of one task, one table per prompt (per grounded plan), its prompt folded above."""
    by_prompt: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_prompt.setdefault(row["prompt"], []).append(row)
    if not by_prompt:
        return ""
    parts = [f"<p><b>GRPO groups of the grounder for this task</b> ({len(rows)} action sequences the trainer sampled "
             f"and scored for {len(by_prompt)} grounded plan(s); advantage = reward against the group's)</p>"]
    for prompt, group in by_prompt.items():
        parts.append(f"<details><summary>the grounder's prompt</summary>{pre(prompt)}</details>"
                     + group_table(group, "actions"))
    return "".join(parts)
