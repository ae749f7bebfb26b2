"""Keyboard-only curation: the shortcut script the studio passes to ``launch(head=...)`` and the queue walk.

Keys (outside text fields, no modifier): ``j``/``k`` next/previous item, ``y`` looks right (reviewed), ``r``
restore, ``u`` undo this curator's last action (both tabs; with none left, an info toast); ``s`` swap, ``x``
exclude, ``t`` tie, ``v`` evidence (Pairs); ``a``/``c`` accept the original/the correction, ``d`` drop, ``e`` edit
(focuses the editor) (Critic).
A key clicks the first *visible* button it names, so one key serves whichever tab is open. A visible button that is
off (disabled) swallows a click silently: for one listed in ``WHY`` the key clicks its hidden twin instead, whose
handler says in an info toast why nothing happened (``c`` on a verdict without a correction: ``wire_why``,
``correction_why``). ``neighbour`` is the
server side of ``j``/``k``; ``wire_walk`` wires it, and after each move the tab's queue is read again (its table and
the team's counters), so a decision another curator made shows at the next key press.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import gradio as gr
import pandas as pd

from engine.review_trail import NothingToUndo
from engine.store import Store
from studio.common import (
    Ctx,
    can_write,
    check_writable,
    curator_of,
    quiet_stop,
    undo_guard,
    user_errors,
    user_info,
    who_of,
)
from studio.queue_sessions import QueueSessions, WalkedTo

# key -> element ids, first visible wins (hidden tabs' buttons have no offsetParent)
KEYS: dict[str, list[str]] = {
    "j": ["pairs-next", "critic-next"], "k": ["pairs-prev", "critic-prev"], "u": ["pairs-undo", "critic-undo"],
    "s": ["pairs-swap"], "x": ["pairs-exclude"], "t": ["pairs-tie"], "r": ["pairs-restore", "critic-restore"],
    "v": ["pairs-evidence"], "a": ["critic-keep_original"], "c": ["critic-accept_correction"],
    "d": ["critic-drop"], "y": ["pairs-reviewed", "critic-reviewed"],
}
FOCUS: dict[str, str] = {"e": "critic-edit"}  # keys that move the focus into a text field instead of clicking
# button id -> its hidden twin's id, clicked by the key while the button is off: a disabled button takes no click, so
# the key did nothing and said nothing (the button being off is no news to someone who never looks at it)
WHY: dict[str, str] = {"critic-accept_correction": "critic-accept_correction-why"}

# The queues' own refreshes (filters, each action's reload) show Gradio's *minimal* progress: a small timer that
# never takes pointer events. The full overlay flashed over the table on every key press and, when a refresh
# landed while its tab was still mounting (a curator name typed on the Run tab, then Pairs opened), Gradio 6.31
# could leave it standing: a table nobody could click (seen once in CI, test_two_curators_...).
QUEUE_PROGRESS = "minimal"

SHORTCUTS_JS = """<script>
(() => {
const KEYS = @KEYS@, FOCUS = @FOCUS@, WHY = @WHY@;
document.addEventListener('keydown', (e) => {
  const tag = (e.target && e.target.tagName || '').toLowerCase();
  if (tag === 'input' || tag === 'textarea' || e.target.isContentEditable) return;
  if (e.ctrlKey || e.metaKey || e.altKey) return;
  if (FOCUS[e.key]) {
    const box = document.querySelector('#' + FOCUS[e.key] + ' textarea, #' + FOCUS[e.key] + ' input');
    if (box && box.offsetParent !== null) { box.focus(); e.preventDefault(); }
    return;
  }
  for (const id of (KEYS[e.key] || [])) {
    const el = document.getElementById(id);
    if (el && el.offsetParent !== null) {
      const why = el.disabled && WHY[id] && document.getElementById(WHY[id]);
      (why || el).click(); e.preventDefault(); return;
    }
  }
});
})();
</script>""".replace("@KEYS@", json.dumps(KEYS)).replace("@FOCUS@", json.dumps(FOCUS)).replace(
    "@WHY@", json.dumps(WHY))


def correction_why(store: Store, run_id: str | None, iteration: int | None, key: str | None,
                   writable: bool) -> str:
    """Why *Accept correction* is off, for ``c`` pressed while it is (``wire_why``): no verdict picked, a session
    that may not write, or a verdict the critic made no correction for (the detail switches the button off then:
    ``studio.critic_queue``)."""
    if not writable:
        return "This session cannot curate (a read-only studio or a viewer's account)."
    if not run_id or iteration is None or not key:
        return "Pick a verdict first."
    task_id, step, k = key.rsplit("|", 2)  # studio.critic_queue.parse_key's rule (that module imports this one)
    verdict = store.frame("verdicts", run_id, int(iteration), task_id=task_id, step=int(step), k=int(k))
    if len(verdict) and pd.isna(verdict["corrected_actions"].iloc[0]):
        return "This verdict has no correction to accept: accept the original (a), edit it (e) or drop it (d)."
    return "Accept correction is off for this verdict."


def wire_why(ctx: Ctx, button_id: str, why: Callable[..., str], inputs: list) -> gr.Button:
    """The hidden twin ``WHY[button_id]`` of an off button, which the key clicks instead of it: its handler shows
    ``why(store, *inputs, writable)`` as an info toast and changes nothing (no outputs; a read, open to viewers)."""
    twin = gr.Button(visible="hidden", elem_id=WHY[button_id])

    def handler(*values, request: gr.Request | None = None) -> None:
        user_info(why(ctx.store, *values, can_write(ctx, request)))

    twin.click(handler, inputs, None, api_name=WHY[button_id].replace("-", "_"), api_visibility="undocumented",
               show_progress="hidden")
    return twin


def neighbour(current: str | None, keys: list[str], page: int, total: int, delta: int,
              page_size: int, skip: set[str] | frozenset[str] = frozenset()) -> tuple[str | None, int]:
    """``(key, page)`` the next item before/after ``current`` in the listed order that is not in ``skip`` (items
    another curator holds, ``engine.leases``); past either end of the page, the neighbouring page (whose first item
    the reload then picks). At the very first/last item nothing moves."""
    i = keys.index(current) + delta if current in keys else 0
    while 0 <= i < len(keys) and keys[i] in skip:
        i += delta if delta else 1
    if 0 <= i < len(keys):
        return keys[i], page
    if i >= len(keys) and page * page_size < total:
        return None, page + 1
    if i < 0 and page > 1:
        return None, page - 1
    return current, page


def stuck_words(kind: str, delta: int, held: bool) -> str:
    """Why ``j``/``k`` did not move: the end of the queue, or only items another curator has open beyond it."""
    what, where = ("pair" if kind == "pair" else "verdict"), ("after" if delta > 0 else "before")
    if held:
        return f"Every {what} {where} this one in the queue is open by another curator right now (j/k skip those)."
    return f"This is the {'last' if delta > 0 else 'first'} {what} of the queue."


BUTTON_WORDS = {"swap": "Swap", "exclude": "Exclude", "tie": "Tie", "restore": "Restore",
                "choose": "Choose these plans", "reviewed": "Looks right", "keep_original": "Accept original",
                "accept_correction": "Accept correction", "drop": "Drop"}


def button_words(action: str) -> str:
    """A curator action as its button reads, quoted, for the line that says it was recorded ("“Accept original”
    recorded for ..."): the stored name (``keep_original``) is not what the curator clicked."""
    return f"“{BUTTON_WORDS.get(action, action.replace('_', ' ').capitalize())}”"


def action_words(action: str) -> str:
    """A stored override action as words for a message ("keep_original" -> "accept original")."""
    return {"reviewed": "review", "keep_original": "accept original"}.get(action, action.replace("_", " "))


def wire_walk(ctx: Ctx, kind: str, picker: gr.Dropdown, table: gr.Dataframe, page: gr.Number, total: gr.State,
              prev_btn: gr.Button, next_btn: gr.Button, page_size: int, sessions: QueueSessions,
              refresh: Callable[..., tuple], queue_inputs: list[gr.components.Component],
              refresh_outputs: list[gr.components.Component]) -> None:
    """``j``/``k`` on a queue tab: the previous/next buttons move ``picker`` through the page in ``table`` and across
    pages (``neighbour``), skipping items another curator holds (``ctx.leases``, queue ``(kind, run, iteration)``).

    Then the queue is read again, so what other curators decided meanwhile shows at each key press (the table's
    override and curator columns, the team's "reviewed N of M"):
    ``refresh(*queue_inputs, walked_to, curator, request)``, with ``queue_inputs`` the run, iteration, filters and page
    the tab's own queue read takes and ``walked_to`` a ``studio.queue_sessions.WalkedTo`` (the key the walk moved to
    or stayed on, and the generation of the tab's ``sessions`` the move started); None when it went to another page,
    whose page change reloads the queue already. The tab's ``refresh`` hands its read to
    ``sessions.after_walk``, which sends nothing when a newer read of the queue began meanwhile and only the parts
    that changed otherwise; ``refresh_outputs``: the line, table, picker (its choices, never its value: a later key
    press keeps its pick), row count and page box (or the tab's page clamp). The refresh is its own event after the
    move, so the pick moves as fast as before.
    Endpoints ``/{prefix}_next`` and ``/{prefix}_prev`` and their refreshes ``/{prefix}_next_reload`` and
    ``/{prefix}_prev_reload`` (all undocumented), prefix ``pairs`` or ``critic``."""
    def move(delta: int):
        def handler(run_id, it, current, df, pg, total_n, name, request: gr.Request):
            # A new generation: the refresh of an earlier move, still reading, is superseded by this one's.
            generation = sessions.begin(request)
            keys = list(df["key"]) if df is not None and "key" in df else []
            taken = ctx.leases.taken((kind, run_id, it), keys, who_of(name, request))
            key, new_page = neighbour(current, keys, int(pg or 1), int(total_n or 0), delta, page_size, taken)
            if key == current and new_page == int(pg or 1) and current is not None:
                # Nothing moved: say why rather than leave a key press unanswered.
                i = keys.index(current) if current in keys else 0
                beyond = keys[i + 1:] if delta > 0 else keys[:i]
                user_info(stuck_words(kind, delta, bool(beyond) and all(k in taken for k in beyond)))
            same_page = new_page == int(pg or 1)
            return (gr.update() if key is None or key == current else key,
                    gr.update() if same_page else new_page,
                    WalkedTo(key, generation) if same_page and key is not None else None)
        return handler

    walked_to = gr.State(None)  # the last move's WalkedTo; None: it went to another page
    prefix = "pairs" if kind == "pair" else "critic"
    for btn, delta, name in ((next_btn, 1, f"{prefix}_next"), (prev_btn, -1, f"{prefix}_prev")):
        btn.click(move(delta), [ctx.run, ctx.iteration, picker, table, page, total, ctx.curator],
                  [picker, page, walked_to], api_name=name, api_visibility="undocumented").then(
            # hidden: a progress timer over the table at every key press was the flicker QUEUE_PROGRESS removed
            refresh, [*queue_inputs, walked_to, ctx.curator], refresh_outputs, api_name=f"{name}_reload",
            api_visibility="undocumented", trigger_mode="always_last", show_progress="hidden")


def undo_handler(ctx: Ctx, message: Callable[..., str]) -> Callable[..., str]:
    """The ``u`` button's handler (the key clicks the button: one path): ``message(store, run_id, iteration,
    curator, guard=...)`` undoes and says what; refused in a read-only studio or for a viewer, without a curator name,
    on an item another curator has open (``studio.common.undo_guard``) or has acted on since (the engine's
    ``UndoRefused``): an error toast. "Nothing to undo" is no mistake: an info toast, and the event stops there
    without a red modal or a traceback (``studio.common.quiet_stop``; nothing changed, so nothing is reloaded)."""
    def on_undo(run_id, it, name, request: gr.Request) -> str:
        check_writable(ctx, request)
        with user_errors():  # no curator name, no run: a line for the user, no traceback in the log
            curator = curator_of(name, request)
            try:
                # An action on an item another curator has open is not undone (studio.common.undo_guard).
                return message(ctx.store, run_id, it, curator, guard=undo_guard(ctx, run_id, it, curator))
            except NothingToUndo as exc:
                said = f"{str(exc).rstrip('.')}."
                user_info(said)
                raise quiet_stop(said) from None
    return on_undo
