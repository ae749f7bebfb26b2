"""The Markdown the Critic tab's actions answer with, as pure functions of the store (nothing kept): the line an
action recorded (``recorded_line``: the button's words, the verdict as the picker names it, the curator, the decision
it replaced and the override id, last), *Accept original*'s warning when the grounding it keeps does not run
(``original_warning``) and an edit's execution (``result_markdown``: its status, answer and values).

Every text from data or a user (a verdict's question and status, a curator's name, an executor's error, a tool's
value) is shown as typed (``studio.render.md_escaped``, or ``md_code`` for an answer or a variable's name): a curator
named ``*ana*`` read as an italic ana, a question holding ``<b>`` lost it as a tag. ``studio.tab_critic`` wires them.
"""

from __future__ import annotations

import pandas as pd

from engine import review_trail
from engine.executor import ExecutionResult
from engine.store import Store
from studio.critic_queue import parse_key, verdict_name
from studio.keys import button_words
from studio.pairs_queue import replaced_note
from studio.queue_lines import missed_training
from studio.render import md_code, md_escaped


def recorded_line(store: Store, run_id: str, iteration: int, key: str, action: str, curator: str, oid: int) -> str:
    """``“Accept original” recorded for “<verdict>” by <curator>, replacing ana's drop (override #12).`` The decision
    it replaced is named (the table shows only the latest); the override id ends the line: clients read it from the
    line's end (a warning follows in a paragraph of its own)."""
    # While the iteration's grounder trains, it has read the verdicts already: the line says the decision misses it.
    note = (replaced_note(review_trail.replaced_decision(store, oid), action, curator)
            + missed_training(store, run_id, int(iteration), "verdict"))
    return (f"{button_words(action)} recorded for “{md_escaped(verdict_name(store, run_id, iteration, key))}” by "
            f"{md_escaped(curator)}{note} (override #{oid}).")


def original_warning(store: Store, run_id: str, iteration: int, key: str) -> str:
    """After *Accept original*: "" when the grounding runs, else a paragraph saying plainly that it does not (the
    executor failed on it when the ground stage ran it: the table's "runs" is "no"), worded as *Save edit*'s for an
    edit that does not run. Recorded all the same (a curator may mean it), but it trains the grounder on actions that
    reach no answer."""
    task_id, step, k = parse_key(key)
    grounding = store.frame("groundings", run_id, int(iteration), task_id=task_id, step=step, k=k)
    if not len(grounding):
        return ""
    row = grounding.iloc[0]
    if bool(row["ok"]):  # it runs (web actions: they parse, nothing runs for them)
        return ""
    why = "the executor failed on it" if pd.isna(row["error"]) or not row["error"] else md_escaped(row["error"])
    verdict = store.frame("verdicts", run_id, int(iteration), task_id=task_id, step=step, k=k)
    corrected = bool(len(verdict)) and not pd.isna(verdict["corrected_actions"].iloc[0])
    return (f"\n\n**But it does not run**: {why}. It will train the grounder on actions that reach no answer: "
            f"{'*Accept correction*, ' if corrected else ''}edit them, or *Drop* the verdict instead.")


def result_markdown(result: ExecutionResult) -> str:
    """An edit's execution: ``**runs cleanly** · answer: `17` `` (or its error) and a bullet per value."""
    # The executor's text is the edit's and the tools': escaped, or "2*x*3" in an error rendered an italic x.
    values = "\n".join(f"- {md_code(name)} = {md_escaped(value)}" for name, value in result.values.items())
    status = "runs cleanly" if result.ok else f"execution error: {md_escaped(result.error)}"
    # A parse error, a failing step or actions that assign nothing leave no answer: say so, not Python's None.
    answer = "no answer" if result.answer is None else f"answer: {md_code(result.answer)}"
    return f"**{status}** · {answer}\n\n{values}"
