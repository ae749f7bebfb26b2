"""The lines a queue tab (Pairs, Critic, Plans) shows around its table, as Markdown text: the row count and page
(``page_info``, ``queue_info``), why a queue is empty before any filter (``nothing_in_iteration``), the team's review
progress (``review_line``), the warning that the iteration's training has read the queue already, done or running
(``trained_line``), and the clause a decision's line gets while that training runs (``missed_training``).

``review_line``, ``trained_line`` and ``missed_training`` read the store handed to them (``engine.review_trail``, the
stage status); the others are pure. Nothing here keeps state between calls.
"""

from __future__ import annotations

from engine.store import Store


def page_info(total: int, page: int, size: int) -> str:
    pages = max(1, -(-total // size))
    return f"{total} row{'' if total == 1 else 's'} · page {min(page, pages)} of {pages}"


def queue_info(total: int, asked: int, shown: int, size: int, empty: str = "") -> str:
    """The line above a queue table (``page_info``): when the page asked for was past the last one, says so (the
    last page is shown, see ``clamped_page``); with no row at all, ``0 rows · <empty>``, the reason (no pair matches
    the filters, iteration 0 has none...) instead of "page 1 of 1"."""
    if not total:
        return f"0 rows · {empty}" if empty else page_info(0, 1, size)
    line = page_info(total, shown, size)
    return line + (f" (page {asked} is past the last page)" if asked != shown else "")


def nothing_in_iteration(iteration: int, noun: str, stage: str, skipped: str | None) -> str:
    """Why an iteration's queue of ``noun`` (pairs, verdicts) is empty before any filter: iteration 0 samples no
    plans; a variant skipped ``stage`` (``skipped``: its recorded reason; "no <noun> yet" would promise rows the run
    never writes); or the iteration has not reached it."""
    if int(iteration) == 0:
        return (f"iteration 0 evaluates the starting agents and samples no plans: {noun} start at iteration 1 "
                "(pick it above)")
    if skipped is not None:
        return f"iteration {int(iteration)} writes no {noun}. Its {stage} stage was skipped" + (
            f": {skipped}" if skipped else "")
    return f"iteration {int(iteration)} has no {noun} yet"


def review_line(store: Store, run_id: str | None, iteration: int | None, target: str,
                curator: str | None = None) -> str:
    """`` · reviewed 12 of 96 by the team, 5 by you`` for a page's info line (items anybody acted on or marked
    reviewed; "by you" when the session's curator is known)."""
    if not run_id or iteration is None:
        return ""
    from engine.review_trail import review_progress

    done = review_progress(store, run_id, int(iteration), target, curator or "")
    mine = f", {done['mine']} by you" if curator else ""
    # studio.team_counters.COUNTER reads this back out of a queue's line: its timer rewrites the counter in place.
    return f" · reviewed {done['reviewed']} of {done['total']} by the team{mine}"


# Per queue target: the training stage that reads it, the role it trains and the queue's noun.
_TRAINING = {"pair": ("train_planner", "planner", "pairs"), "verdict": ("train_grounder", "grounder", "verdicts")}


def _training_status(store: Store, run_id: str, iteration: int, target: str) -> str | None:
    """The status of the stage that trains on ``target``'s queue in this iteration (None: not recorded)."""
    return (store.stage_status(run_id, int(iteration)).get(_TRAINING[target][0]) or {}).get("status")


def trained_line(store: Store, run_id: str | None, iteration: int | None, target: str) -> str:
    """A queue's warning when the iteration's training on it has read it already: the stage (``train_planner`` for
    pairs, ``train_grounder`` for verdicts) is done, or running (it reads its data as it starts: a team curating
    while *Next stage* trains the iteration saw no word that their decisions missed it). A curator landing on a
    finished iteration (the studio's default pick) read "press Next stage to train on them" and changed data that no
    stage would read again."""
    if not run_id or iteration is None:
        return ""
    stage, role, data = _TRAINING[target]
    status = _training_status(store, run_id, iteration, target)
    # Only pair actions have a "changed since training" count (the Pairs tab's curation table): the Critic tab's
    # banner named that table too, for verdicts it never counts.
    if status == "running":
        counted = " (the Pairs tab's curation table counts it as changed once the stage is done)" if (
            target == "pair") else ""
        return (f"\n\n**Iteration {int(iteration)}'s {role} is training on these {data} right now** ({stage} "
                f"running): it read them when it started, so a change made here now is recorded and exported"
                f"{counted}, but this training does not have it; only a later run of that stage reads it.")
    if status != "done":
        return ""
    counted = " and the Pairs tab's curation table counts it as changed since," if target == "pair" else ""
    return (f"\n\n**Iteration {int(iteration)}'s {role} has trained on these {data} already** ({stage} done): "
            f"a change here is recorded and exported,{counted} but no training reads it unless that stage runs "
            "again. To steer the next training, curate the newest iteration before its training stage runs.")


def missed_training(store: Store, run_id: str, iteration: int, target: str) -> str:
    """A clause for a decision's "recorded" line while the iteration's training on ``target`` runs (it read its data
    as it started, so the decision misses it): ``, too late for the planner's training under way``; "" otherwise
    (a finished training says so in ``trained_line``'s banner, which stays above the queue)."""
    if _training_status(store, run_id, iteration, target) != "running":
        return ""
    return f", too late for the {_TRAINING[target][1]}'s training under way ({_TRAINING[target][0]} running)"
