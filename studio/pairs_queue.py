"""The Pairs tab's queue, read from the store (no Gradio events): a page of effective pairs as a table
(``pairs_table``), a pair's key (``task|step|pair_idx``) and the label the picker shows for it (``pair_label``,
``page_labels``), the side-by-side view (``pair_detail``), the plans *Choose these plans* offers and the shown pair's
own (``plan_choices``, ``choose_fields``), and why a queue is empty (``empty_note``). ``studio.tab_pairs`` wires them
to the page.

A curator's trace, shared with the Critic tab: a row with no live decision whose latest curator row is a "looks
right" reads ``looks right`` and its reviewer in the action and curator columns (``with_looks_right``,
``mark_looks_right``; the store's filters are unchanged: a review is not an override); the detail's head names the
decision, the other curator's decision it replaced and who last said "looks right" (``decision_line``: "excluded by
ben (replaced ana's swap), looked right by cy"); an action's status line names what it replaced
(``replaced_note``: ", replacing ana's swap", ", taking back …", ", leaving … standing"; a curator's own earlier
decision is not named). Both read ``engine.review_trail.looked_right`` / ``replaced_decision``.
"""

from __future__ import annotations

import html

import gradio as gr
import pandas as pd

from engine import review_trail
from engine.store import Store
from studio.common import user_error
from studio.keys import action_words
from studio.picks import tri, with_own_label
from studio.queue_lines import nothing_in_iteration
from studio.render import md_escaped, md_quote, plan_labels, pre, word_diff_html

PAGE = 20
# The key (task|step|pair_idx) stays first, narrow (clipped on screen, whole in the cell): a row click reads the first
# cell (studio.picks.first_cell). The step comes next: an iterative run (sample.formulation = iterative) makes a pair
# per task-step, and with the key clipped two steps of one task read as the same row. It is there in a onetime run
# too (every step 0): Gradio sets column widths by position once, when the table is built, so a column shown only for
# iterative runs would need the widths sent anew with each page. The short columns a curator decides by come next,
# each wide enough for its header, then the question in a capped width (WIDTHS; one line per row): at ~1400 px an
# uncapped question pushed margin and override off the screen. The two log-PPLs (also in the pair's view) come last.
COLUMNS = ["key", "step", "chosen_k", "rejected_k", "margin", "override_action", "curator", "domain", "question",
           "chosen_logppl", "rejected_logppl"]
WIDTHS = ["150px", "70px", "105px", "125px", "85px", "180px", "100px", "90px", "320px", "160px", "175px"]


def pair_key(task_id: str, step: int, pair_idx: int) -> str:
    return f"{task_id}|{int(step)}|{int(pair_idx)}"


def parse_key(key: str) -> tuple[str, int, int]:
    task_id, step, idx = key.rsplit("|", 2)
    return task_id, int(step), int(idx)


def excerpt(text: str | None, width: int = 70) -> str:
    """The start of a question on one line."""
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= width else flat[:width - 1] + "…"


def pair_label(question: str, key: str, chosen_k: int, rejected_k: int, width: int = 70, quoted: bool = False) -> str:
    """What the pair picker shows: the question's start, the step (iterative plans), the two plan numbers and the
    task id (two questions can start alike; the label must still tell the pairs apart). ``quoted``: the question in
    quotes, for a sentence."""
    task_id, step, idx = parse_key(key)
    where = f" · step {step}" if step else ""
    extra = f" · pair {idx + 1}" if idx else ""
    start = f"“{excerpt(question, width)}”" if quoted else excerpt(question, width)
    return f"{start}{where} · plan {int(chosen_k)} over {int(rejected_k)}{extra} · {task_id}"


def number(text: str | float | None) -> float | None:
    """A margin filter box: blank means no bound; anything else must be a number."""
    if text is None or str(text).strip() == "":
        return None
    try:
        return float(text)
    except ValueError:
        raise user_error(f"margin bounds must be numbers, got {text!r}") from None


def pairs_table(store: Store, run_id: str | None, iteration: int | None, *, min_margin: float | None = None,
                max_margin: float | None = None, text: str = "", overridden: str = "any", excluded: str = "any",
                ties: str = "any", order: str = "task", page: int = 1, size: int = PAGE) -> tuple[pd.DataFrame, int]:
    """One page of effective pairs as display rows (``key`` = task|step|pair_idx, then ``step`` on its own: see
    ``COLUMNS``) and the matching total."""
    if not run_id or iteration is None:
        return pd.DataFrame(columns=COLUMNS), 0
    df = store.pairs_page(run_id, int(iteration), min_margin=min_margin, max_margin=max_margin, text=text or None,
                          overridden=tri(overridden), excluded=tri(excluded), ties=tri(ties), order=order,
                          limit=size, offset=(max(int(page), 1) - 1) * size)
    total = int(df["total"].iloc[0]) if len(df) else 0
    df = df.assign(key=[pair_key(*r) for r in zip(df["task_id"], df["step"], df["pair_idx"])])
    return with_looks_right(store, run_id, int(iteration), df, "pair", "pair_idx")[COLUMNS].round(
        {"chosen_logppl": 4, "rejected_logppl": 4, "margin": 4}), total


LOOKS_RIGHT = "looks right"  # the decision column's word for a "looks right" that is an item's latest row


def with_looks_right(store: Store, run_id: str, iteration: int, df: pd.DataFrame, target: str,
                     index: str) -> pd.DataFrame:
    """A queue page with its "looks right" reviews filled in: a row without a live decision whose latest curator row
    is a "looks right" (``engine.review_trail.looked_right``) reads ``looks right`` in ``override_action`` and its
    reviewer in ``curator`` (both were blank, so a review left no trace in the table). A decision keeps its own
    words (the detail says who looked at it afterwards); the store's filters (overridden, excluded) are untouched."""
    if not len(df):
        return df
    reviewed = review_trail.looked_right(store, run_id, iteration, target, sorted({str(t) for t in df["task_id"]}))
    if not reviewed:
        return df
    return mark_looks_right(df, [reviewed.get((str(t), int(s), int(i)))
                                 for t, s, i in zip(df["task_id"], df["step"], df[index])])


def mark_looks_right(df: pd.DataFrame, reviewers: list) -> pd.DataFrame:
    """``df`` with ``looks right`` and the reviewer in ``override_action`` / ``curator`` where a row has no live
    decision and ``reviewers`` (one per row: the curator whose "looks right" is the row's latest, or None) names
    one (``with_looks_right``; the critic queue reads the reviewer from its ``looks_right_curator`` column)."""
    who = [None if _decided(a) or not _decided(r) else str(r) for a, r in zip(df["override_action"], reviewers)]
    return df.assign(override_action=[LOOKS_RIGHT if w else a for w, a in zip(who, df["override_action"])],
                     curator=[w or c for w, c in zip(who, df["curator"])])


def _decided(value: object) -> bool:
    """Is a cell of a live decision's column set (neither NULL nor NaN: pandas reads a missing cell as either)?"""
    return value is not None and not pd.isna(value)


def replaced_note(prior: dict | None, action: str, curator: str) -> str:
    """The decision ``curator``'s action took the place of (``engine.review_trail.replaced_decision``), for its status
    line: ", replacing ana's swap", ", taking back ana's swap" (a restore), ", leaving ana's swap standing" (a "looks
    right"); "" when it replaced none, or only the curator's own. Without it a later curator's decision silently hid
    an earlier one's."""
    if not prior or prior["curator"] == curator:
        return ""
    # The note ends a Markdown line: the other curator's name is shown as typed (a "*ana*" read as an italic ana).
    what = f"{md_escaped(prior['curator'])}'s {action_words(prior['action'])}"
    if action == "reviewed":
        return f", leaving {what} standing"
    # swapping a swapped pair writes a restore (engine.curation.swap_pair): it takes the swap back
    back = action == "restore" or (action == "swap" and prior["action"] == "swap")
    return f", {'taking back' if back else 'replacing'} {what}"


def decision_line(store: Store, action: str | None, curator: str | None, override_id: object,
                  looked: str | None) -> str:
    """Who decided an item and what that replaced, and who last said it looks right, for the detail's head:
    "swap by ben (replaced ana's exclude)", "looked right by ana", "drop by ben, looked right by cy"; "" for an item
    nobody touched."""
    parts = []
    if action:
        prior = review_trail.replaced_decision(store, int(override_id)) if _decided(override_id) else None
        mine = prior is not None and prior["curator"] == curator  # a curator changing their mind: nothing hidden
        was = f" (replaced {prior['curator']}'s {action_words(prior['action'])})" if prior and not mine else ""
        parts.append(f"{action_words(action)} by {curator}{was}")
    if looked:
        parts.append(f"looked right by {looked}")
    return ", ".join(parts)


def _effective_pair(store: Store, run_id: str, iteration: int, key: str) -> pd.Series | None:
    """The pair ``key`` as it trains now (``Store.effective_pairs`` of its task), None when it no longer exists."""
    task_id, step, idx = parse_key(key)
    eff = store.effective_pairs(run_id, int(iteration), task_id=task_id)
    eff = eff[(eff["step"] == step) & (eff["pair_idx"] == idx)]
    return eff.iloc[0] if len(eff) else None


def pair_name(store: Store, run_id: str, iteration: int, key: str) -> str:
    """The pair as the picker names it (``pair_label``: question, step, plan numbers as they are now), for status
    lines; the question alone when the pair is gone."""
    task_id = parse_key(key)[0]
    question = store.get_task(run_id, task_id).question
    pair = _effective_pair(store, run_id, iteration, key)
    if pair is None:
        return f"“{excerpt(question)}”"
    return pair_label(question, key, pair["chosen_k"], pair["rejected_k"], quoted=True)


def pair_detail(store: Store, run_id: str | None, iteration: int | None, key: str | None) -> tuple[str, str, str]:
    """``(prompt, chosen, rejected)`` HTML of one pair, each plan with its log-PPL."""
    if not (run_id and key) or iteration is None:
        return "", "", ""
    task_id, step, _ = parse_key(key)
    pair = _effective_pair(store, run_id, int(iteration), key)
    if pair is None:
        return "<p>This pair no longer exists.</p>", "", ""
    plans = store.plan_texts(run_id, int(iteration), task_id, step)
    by_k = {int(r.k): r for r in plans.itertuples(index=False)}
    flags = ", ".join(f for f in ("excluded", "tie") if bool(pair[f])) or "in training"
    chosen, rejected = by_k.get(int(pair["chosen_k"])), by_k.get(int(pair["rejected_k"]))
    label = pair_label(store.get_task(run_id, task_id).question, key, pair["chosen_k"], pair["rejected_k"])
    # Who set it, when a curator did ("tie · tie" repeated the flag the action had set): "tie by ann",
    # "excluded by ann", or "in training · swap by ann"; with the decision it replaced ("excluded by ben (replaced
    # ana's swap)") and who last said it looks right ("in training · looked right by ana"): a review left no trace.
    action = str(pair["override_action"]) if pair["overridden"] else ""
    looked = review_trail.looked_right(store, run_id, int(iteration), "pair", [task_id]).get(
        (task_id, step, int(pair["pair_idx"])))
    line = decision_line(store, action, pair["curator"], pair["override_id"], looked)
    flag_of = {"tie": "tie", "exclude": "excluded"}
    if action in flag_of and flag_of[action] in flags:
        by = " " + line.removeprefix(action_words(action) + " ")
    else:
        by = f" · {line}" if line else ""
    head = f"<p>{html.escape(label)} · margin {pair['margin']:.4f} · {flags}{html.escape(by)}</p>"
    diff = (word_diff_html(chosen.text, rejected.text) if chosen is not None and rejected is not None else "")
    return (head + pre(chosen.prompt if chosen else ""),
            f"<b>chosen k={pair['chosen_k']} · log-PPL {pair['chosen_logppl']:.4f}</b>" + pre(chosen and chosen.text),
            f"<b>rejected k={pair['rejected_k']} · log-PPL {pair['rejected_logppl']:.4f}</b>"
            + pre(rejected and rejected.text) + "<p><i>chosen → rejected, word by word:</i></p>" + diff)


def plan_choices(store: Store, run_id: str, iteration: int, key: str) -> list[tuple[str, int]]:
    """The *Choose these plans* pickers' choices: every plan of the pair's task-step by k, with its log-PPL ("not
    scored": the engine refuses it) and, when its text repeats an earlier plan's, "same text as k=0" (a pair of two
    identical texts is refused too)."""
    task_id, step, _ = parse_key(key)
    return plan_labels(store.task_plans(run_id, int(iteration), task_id, step).sort_values("k"))


def choose_fields(store: Store, run_id: str | None, iteration: int | None, key: str | None) -> tuple[dict, dict]:
    """The two *Choose* pickers for a newly shown pair: its plans (``plan_choices``) with the pair's own chosen and
    rejected k picked, so the button starts from the pair as it is; both empty when no pair is shown."""
    pair = _effective_pair(store, run_id, int(iteration), key) if run_id and key and iteration is not None else None
    if pair is None:
        return gr.update(choices=[], value=None), gr.update(choices=[], value=None)
    choices = plan_choices(store, run_id, int(iteration), key)
    return (gr.update(choices=choices, value=int(pair["chosen_k"])),
            gr.update(choices=choices, value=int(pair["rejected_k"])))


def page_labels(store: Store, run_id: str | None, iteration: int | None, df: pd.DataFrame,
                current: str | None = None) -> list[tuple[str, str]]:
    """The pair picker's choices for a page of ``pairs_table`` (``pair_label``, so plan numbers as they are now); with
    ``current`` not on the page (an action took it off the filtered queue), its own label is kept among them, so the
    picked pair still reads as a pair rather than as its key (``studio.picks.with_own_label``)."""
    labels = [(pair_label(q, k, c, r), k) for q, k, c, r in zip(df["question"], df["key"], df["chosen_k"],
                                                               df["rejected_k"])]
    if not run_id or iteration is None:
        return labels

    def own_label(key: str) -> str:
        question = store.get_task(run_id, parse_key(key)[0]).question
        pair = _effective_pair(store, run_id, int(iteration), key)
        return excerpt(question) if pair is None else pair_label(question, key, pair["chosen_k"], pair["rejected_k"])

    return with_own_label(labels, current, own_label)


def empty_note(iteration: int | None, lo: float | None = None, hi: float | None = None, text: str = "",
               overridden: str = "any", excluded: str = "any", ties: str = "any", unfiltered: int = 0,
               skipped: str | None = None) -> str:
    """Why the pairs queue shows no row: the iteration has none at all (``unfiltered``, its count without filters, is
    0: iteration 0 samples no plans, a variant may skip the pairs stage -- ``skipped`` is then its recorded reason --,
    a later iteration may not have reached it), an empty margin range, or the filters set (named)."""
    if iteration is None:
        return "pick a run and an iteration above"
    if not unfiltered:
        return nothing_in_iteration(iteration, "pairs", "pairs", skipped)
    if lo is not None and hi is not None and lo > hi:
        return f"the margin range is empty: min margin {lo:g} is above max margin {hi:g}"
    words = ([f"search {md_quote(text)}"] if text else []) + [f"{name} {v:g}" for name, v in (
        ("min margin", lo), ("max margin", hi)) if v is not None] + [
        f"{name} = {v}" for name, v in (("overridden", overridden), ("excluded", excluded), ("ties", ties))
        if v in ("yes", "no")]
    return "no pair matches these filters: " + (", ".join(words) or "none set")
