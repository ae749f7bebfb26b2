"""Critic tab: a review queue of verdicts (filtered by critic status and reviewed or not, paginated in SQL by
``Store.verdict_queue``); the original plan/grounding and the critic's correction side by side with a word diff;
curator decisions through ``engine.verdict_curation`` (accept original, accept correction, edit, drop, restore; looks
right and undo: ``engine.review_trail``); an edit is previewed with ``engine.executor`` on a button and saved only when
it parses; a verdict without a correction says so in one line and switches *Accept correction* off; the critic-curator
agreement ("looks right" agrees; per domain, per tool the grounding calls, per decision, per curator) with the verdicts
where curators overruled the critic one click away (the *Reviewed = overruled* filter). No ``nan`` or ``None`` reaches
a sentence on the page; an executor's error or a tool's value shows as typed (``studio.render.md_escaped``). The
filters are kept in the browser across reloads (``studio.remember``).

Keyboard (``studio.keys``): j/k next/previous verdict, y looks right (``reviewed``), a accept the original, c accept
the correction, d drop, r restore, e edit, u undo this curator's last decision (with none: an info toast). The
picker names a verdict by its question, plan and status.

Handlers: ``verdict_table``, ``verdict_detail`` (``verdict_view``: with the button's state), ``verdict_action``,
``preview_edit``, ``save_edit``, ``agreement_markdown``, ``undo_message``. API endpoints (``gradio_client``):
``/critic_queue`` (any filter change: one ``always_last`` event), ``/critic_detail``, ``/critic_preview_edit`` (reads),
``/critic_<action>`` (keep_original, accept_correction, drop, restore), ``/critic_undo`` and ``/critic_save_edit``
(writes); the refreshes after an action (``/critic_<action>_reload``, ``/critic_<action>_detail``,
``/critic_save_edit_reload``), ``/critic_next``, ``/critic_prev``, the queue's refresh after them
(``/critic_next_reload``, ``/critic_prev_reload``: the table and its line, not the agreement, so another curator's
decision shows at the next key press; nothing over a newer read of the queue, only what changed:
``studio.queue_sessions``), the team counters' timer (``/critic_counters``, ``/critic_counters_on``:
``studio.team_counters``), whose tick also redraws the agreement (another curator's decision shows within a tick,
redrawn only when the iteration's verdict log has grown, ``studio.critic_refresh``),
``/critic_select_row`` and ``/critic_page_clamp`` (a page past the last one: the page box moves to the last page,
which the queue shows) are undocumented. *Save edit* names the override the
edit wrote (``engine.verdict_curation.SavedEdit``) and says plainly when the saved actions do not run (they parse, a
formula fails: saved, as the engine allows, but they would train the grounder on actions that reach no answer) or run
to an answer other than the gold one; *Accept original* says the same when the grounding it keeps does not run
(``original_warning``: recorded all the same). An action's line names the other curator's decision it replaced
(", replacing ana's drop"); these lines are ``studio.critic_lines``'s, every name in them shown as typed. The view
gives the gold answer and what the original and the correction reach (``studio.critic_queue``). An empty queue says why
(iteration 0 has no verdicts, or which filters match nothing); the buttons that need a verdict are off while none is
picked; the table's grounding columns are "runs" (executes without an error) and "correct" (reaches the gold answer);
the original -> correction diff goes action by action (``studio.render.action_diff_html``).

On a Hugging Face Space a page curates only the runs it created (``studio.curation_rights``): every write endpoint
(the decisions, *Save edit*, undo) refuses any other run server side, its buttons stay off (*Run edit* stays: a read),
a pick there takes no lease, and a line under the picker (drawn with the verdict and after every load) says why and to
start one's own run instead.

The queue's reads and the agreement live in ``studio.critic_queue`` (re-exported here: this module is the tab's
handler surface), its refreshes (the load, the action reloads, the walk's refresh) in ``studio.critic_refresh``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gradio as gr

from engine import review_trail, verdict_curation
from engine.outcome import run_grounding, toolbox_for_run
from engine.store import Store
from studio.common import (
    Ctx,
    check_lease,
    claim_note,
    curator_of,
    leasing_name,
    user_error,
    user_errors,
)
from studio.critic_lines import original_warning as original_warning
from studio.critic_lines import recorded_line
from studio.critic_lines import result_markdown as _result_markdown
from studio.critic_queue import (
    COLUMNS as COLUMNS,
)
from studio.critic_queue import (
    GROUNDING_COLUMNS as GROUNDING_COLUMNS,
)
from studio.critic_queue import (
    PAGE as PAGE,
)
from studio.critic_queue import (
    STATUSES as STATUSES,
)
from studio.critic_queue import (
    WIDTHS as WIDTHS,
)
from studio.critic_queue import (
    Outcome,
    _step_words,
    judged_preview,
    outcome_key,
    remember_outcome,
)
from studio.critic_queue import (
    _row as _row,
)
from studio.critic_queue import (
    _subgoals as _subgoals,
)
from studio.critic_queue import (
    _yes_no as _yes_no,
)
from studio.critic_queue import (
    agreement_markdown as agreement_markdown,
)
from studio.critic_queue import (
    empty_note as empty_note,
)
from studio.critic_queue import (
    page_labels as page_labels,
)
from studio.critic_queue import (
    parse_key as parse_key,
)
from studio.critic_queue import (
    verdict_detail as verdict_detail,
)
from studio.critic_queue import (
    verdict_key as verdict_key,
)
from studio.critic_queue import (
    verdict_label as verdict_label,
)
from studio.critic_queue import (
    verdict_labels as verdict_labels,
)
from studio.critic_queue import (
    verdict_name as verdict_name,
)
from studio.critic_queue import (
    verdict_table as verdict_table,
)
from studio.critic_queue import (
    verdict_view as verdict_view,
)
from studio.critic_refresh import CriticRefresh
from studio.curation_rights import check_curation, guarded_undo, may_curate, read_only_notice
from studio.keys import QUEUE_PROGRESS, action_words, correction_why, undo_handler, wire_walk, wire_why
from studio.live_views import watch
from studio.pairs_queue import replaced_note
from studio.picker import Picker
from studio.picks import first_cell
from studio.queue_lines import missed_training
from studio.relay import own_change
from studio.remember import remember
from studio.render import md_code, md_escaped, static_table_css
from studio.tab_pairs import excerpt
from studio.team_counters import wire_counters


def undo_message(store: Store, run_id: str | None, iteration: int | None, curator: str,
                 guard: Callable[[dict[str, Any]], None] | None = None) -> str:
    """Undo ``curator``'s last decision on this iteration's verdicts and say which."""
    if not run_id or iteration is None:
        raise ValueError("Pick a run and an iteration first.")
    row = review_trail.undo_last(store, run_id, int(iteration), curator, "verdict", guard=guard)
    question = excerpt(store.get_task(run_id, row["task_id"]).question)
    return (f"Undid your {action_words(row['action'])} of {_step_words(row.get('step'))}plan {int(row['k'])} for "
            f"“{md_escaped(question)}” "
            f"(override #{int(row['override_id'])}).")


def verdict_action(store: Store, run_id: str, iteration: int, key: str, action: str, curator: str,
                   reason: str = "") -> str:
    """keep_original | accept_correction | drop | restore | reviewed (edits go through ``save_edit``)."""
    fns = {"keep_original": verdict_curation.keep_original, "accept_correction": verdict_curation.accept_correction,
           "drop": verdict_curation.drop_verdict, "restore": verdict_curation.restore_verdict}
    task_id, step, k = parse_key(key)
    if action == "reviewed":  # looked at, left as it is
        oid = review_trail.mark_reviewed(store, run_id, int(iteration), "verdict", task_id, step, k, curator=curator,
                                     reason=reason)
    else:
        oid = fns[action](store, run_id, int(iteration), task_id, step, k, curator=curator, reason=reason)
    line = recorded_line(store, run_id, iteration, key, action, curator, oid)  # the decision it replaced named
    return line + (original_warning(store, run_id, iteration, key) if action == "keep_original" else "")


def preview_edit(store: Store, run_id: str, key: str, actions: str) -> str:
    """Execute the edited actions without saving (an iterative step's after the gold actions of the steps before it,
    as the ground stage ran them): the values, or the parse/execution error."""
    task_id, step, _ = parse_key(key)
    task = store.get_task(run_id, task_id)
    return _result_markdown(run_grounding(task, step, actions, toolbox_for_run(store, run_id)))


def save_edit(store: Store, run_id: str, iteration: int, key: str, actions: str, curator: str,
              reason: str = "") -> str:
    """Validate (parse), execute and record the edit; a parse error is shown and nothing is saved. Actions that parse
    but fail when executed (``R1 = Calculator(2 +)``: the line parses, the formula does not) are saved, as the engine
    allows (``engine.verdict_curation.edit_correction``), and the line says plainly that they do not run and so would
    train the grounder on actions that reach no answer; actions that run say whether they reach the gold answer."""
    task_id, step, k = parse_key(key)
    try:
        saved = verdict_curation.edit_correction(store, run_id, int(iteration), task_id, step, k, actions,
                                                 curator=curator, reason=reason)
    except verdict_curation.InvalidActionsError as exc:
        return f"**Not saved — parse error:** {md_escaped(exc.parse_error)}"
    # Named as the other actions name a verdict, by the override the edit wrote (not the newest row read back, which
    # may be another curator's written in between).
    label = md_escaped(verdict_name(store, run_id, iteration, key))
    said = (f"Edit saved for “{label}” by {md_escaped(curator)}"
            + replaced_note(review_trail.replaced_decision(store, saved.override_id), "edit", curator)
            + missed_training(store, run_id, int(iteration), "verdict"))  # a training under way read them already
    result = saved.preview
    task = store.get_task(run_id, task_id)
    if task.domain == "web":  # nothing runs for web actions (engine.executor): no answer is expected
        return (f"{said} (override #{saved.override_id}). Web actions are not executed here.\n\n"
                + _result_markdown(result))
    if not result.ok or result.answer is None:
        why = md_escaped(result.error) if result.error else "no action assigns an answer"
        return (f"{said} (override #{saved.override_id}), **but it does not run**: {why}. It will train the grounder "
                "on actions that reach no answer: edit again, or *Drop* the verdict.\n\n"
                + _result_markdown(result))
    # Judged from the preview the save ran, as the ground stage judges a grounding (no second run of the tools), and
    # kept where the verdict's view, drawn next, reads it.
    gold, correct = judged_preview(task, step, actions.strip(), result)
    remember_outcome(outcome_key(store, run_id, task_id, step, actions.strip()), gold,
                     Outcome(result.answer, None, correct))
    if correct:
        verdict = f"It reaches the gold answer {md_code(gold)}."
    else:
        verdict = (f"It runs, but its answer {md_code(result.answer)} is not the gold answer {md_code(gold)}: the "
                   "grounder will train on actions that reach a wrong answer.")
    return f"{said} (override #{saved.override_id}). {verdict}\n\n" + _result_markdown(result)


def build(ctx: Ctx) -> None:
    with gr.Row():
        status = gr.Dropdown(STATUSES, value="", label="Critic status", elem_id="critic-status")
        reviewed = gr.Radio(["any", "yes", "no", ("overruled the critic", "overruled")], value="any",
                            label="Reviewed", elem_id="critic-reviewed-filter")
        order = gr.Dropdown([("task", "task"), ("critic vs execution disagreement first", "disagreement"),
                             ("not reviewed yet first", "unreviewed"), ("shuffled (audit)", "shuffled")],
                            value="task", label="Order", elem_id="critic-order")
        page = gr.Number(1, label="Page", precision=0, minimum=1)
    with gr.Row():
        agreement = gr.Markdown(elem_id="critic-agreement")
        overruled_btn = gr.Button("Open the overruled ones", elem_id="critic-overruled", size="sm", scale=0)
    info = gr.Markdown(elem_id="critic-info")
    table = gr.Dataframe(interactive=False, elem_id="critic-table", max_height=300, column_widths=WIDTHS)
    gr.HTML(static_table_css("critic-table"), visible="hidden", js_on_load=None)  # a click picks: no edit-box look
    total_rows = gr.State(0)
    with gr.Row():
        prev_btn = gr.Button("◀ Previous (k)", elem_id="critic-prev", size="sm", scale=0)
        pick = Picker([], label="Verdict", elem_id="critic-pick", scale=4)
        next_btn = gr.Button("Next (j) ▶", elem_id="critic-next", size="sm", scale=0)
    lease = gr.Markdown(elem_id="critic-lease")
    # On a Space, why this run is read-only for this page and what to do instead (studio.curation_rights).
    read_only = gr.Markdown(elem_id="critic-read-only")
    with gr.Row():
        original, corrected = gr.HTML(elem_id="critic-original"), gr.HTML(elem_id="critic-corrected")
    diff = gr.HTML(elem_id="critic-diff")
    with gr.Row():
        acts = {a: gr.Button(label, elem_id=f"critic-{a}", interactive=not ctx.read_only) for a, label in (
            ("keep_original", "Accept original (a)"), ("accept_correction", "Accept correction (c)"),
            ("drop", "Drop (d)"), ("restore", "Restore (r)"), ("reviewed", "Looks right (y)"))}
        undo = gr.Button("Undo my last (u)", elem_id="critic-undo", interactive=not ctx.read_only)
    edit = gr.Textbox(label="Edit actions (e)", lines=4, elem_id="critic-edit")
    reason = gr.Textbox(label="Reason (optional)")
    with gr.Row():
        preview_btn = gr.Button("Run edit (preview)", elem_id="critic-preview")
        save_btn = gr.Button("Save edit", variant="primary", elem_id="critic-save", interactive=not ctx.read_only)
    ctx.write_controls += [*acts.values(), undo, save_btn]  # off for a viewer (studio.app)
    result = gr.Markdown(elem_id="critic-result")

    def act(action):
        def handler(run_id, it, key, name, why, request: gr.Request):
            check_curation(ctx, run_id, request, "verdict")  # on a Space, only a run this page created
            if not key:
                raise user_error("Pick a verdict first.")
            curator = curator_of(name, request)
            check_lease(ctx, "verdict", run_id, it, key, curator)
            with user_errors():  # the engine's refusal: a line for the curator, no traceback in the server log
                return verdict_action(ctx.store, run_id, it, key, action, curator, why)
        return handler

    def on_save(run_id, it, key, actions, name, why, request: gr.Request):
        check_curation(ctx, run_id, request, "verdict")
        if not key:
            raise user_error("Pick a verdict first.")
        curator = curator_of(name, request)
        check_lease(ctx, "verdict", run_id, it, key, curator)
        with user_errors():  # a verdict gone meanwhile (critique --retry-errors): a line, not a traceback
            return save_edit(ctx.store, run_id, it, key, actions, curator, why)

    # The queue's reads: the run, the iteration, the filters and the page. The filters apply at each change (no text
    # box waits for Enter), so what they hold is what the queue shows.
    queue_inputs = [ctx.run, ctx.iteration, status, reviewed, order, page]
    # The queue reloads by itself once a stage it reads (critique, train_grounder) ends for the view
    # (studio.live_views).
    live = watch(ctx, "critic")
    queue = CriticRefresh(ctx, order.elem_id, live)  # its reads and refreshes, per session (studio.critic_refresh)
    filters = [*queue_inputs, pick, ctx.curator]  # the curator: "by you"
    remember(ctx, "critic", {"status": (status, [status.change]), "reviewed": (reviewed, [reviewed.change]),
                             "order": (order, [order.change])})
    # A clamped page reaches the page box through a State (clamped_page): /critic_queue keeps the four outputs a
    # client reads (tests/test_studio_load.py unpacks them). [page, nonce]: the same clamp twice still moves the box.
    clamped = gr.State(None)
    clamped.change(lambda c: c[0] if c else gr.update(), clamped, page, api_name="critic_page_clamp",
                   api_visibility="undocumented", show_progress="hidden")
    outputs = [info, table, pick, agreement, total_rows, clamped]
    # the detail switches *Accept correction* off for a verdict without a correction (its key c then clicks a hidden
    # twin that says why in a toast: studio.keys.wire_why), and
    # the other buttons that need a verdict off while none is shown (with the detail: no extra event)
    needs_verdict = [acts[a] for a in ("keep_original", "drop", "restore", "reviewed")] + [preview_btn, save_btn]
    detail = [original, corrected, diff, edit, acts["accept_correction"], *needs_verdict]
    wire_why(ctx, "critic-accept_correction", correction_why, [ctx.run, ctx.iteration, pick])

    def view(run_id, it, key, request: gr.Request | None = None):
        # The write buttons come on with a pick only where the session may curate the run (a viewer's stay off, as
        # the load handler left them; on a Space, those of a run this page did not create: studio.curation_rights).
        writable = may_curate(ctx, run_id, request)
        on = gr.update(interactive=bool(key) and writable)
        preview = gr.update(interactive=bool(key))  # a read: a read-only studio may run an edit too
        return (*verdict_view(ctx.store, run_id, it, key, read_only=not writable), *[on] * 4, preview, on)

    # A write's refusal (gr.Error) is a toast; with its progress shown, Gradio's status tracker would also stamp a
    # bare "Error" over the result line and leave it there above the previous message: writes hide their progress.
    quiet = "hidden"
    # in order: see studio.app.CONCURRENCY
    # The view key's change as this event's own trigger (studio.relay: a shared one re-ran every tab's load).
    on_view = own_change(ctx.view, "critic_queue_on_view")
    on_name = own_change(ctx.renamed, "critic_queue_on_name")  # a name typed mid-session (Ctx.renamed)
    search = gr.on([status.change, reviewed.change, order.change, page.change, on_view,
                    on_name, live.trigger.change], queue.load,
          filters, outputs, api_name="critic_queue", trigger_mode="always_last", show_progress=QUEUE_PROGRESS)
    table.select(first_cell, None, pick, api_name="critic_select_row", api_visibility="undocumented")
    # One click from the agreement line to the disagreements: the queue filtered to them (its change reloads it).
    overruled_btn.click(lambda: "overruled", None, reviewed, api_name="critic_show_overruled",
                        api_visibility="undocumented")
    drawn = gr.State(None)  # [run, iteration, key] the verdict's view was last drawn for

    def shown(run_id, it, key, request: gr.Request | None = None):
        return (*view(run_id, it, key, request), read_only_notice(ctx, run_id, request, "verdict"), [run_id, it, key])

    pick.change(shown, [ctx.run, ctx.iteration, pick], [*detail, read_only, drawn], api_name="critic_detail")

    def redraw(run_id, it, key, was, request: gr.Request | None = None):
        """After the queue reloads: the same key (task|step|k) in another iteration or run changes no picker value,
        so no pick change drew it (the view kept the previous iteration's verdict): drawn here. The read-only notice
        follows every load: a run switch that changes no pick (an empty queue) must still say it."""
        if not key or was == [run_id, it, key]:
            return (*(gr.skip(),) * len(detail), read_only_notice(ctx, run_id, request, "verdict"), gr.skip())
        return shown(run_id, it, key, request)

    search.then(redraw, [ctx.run, ctx.iteration, pick, drawn], [*detail, read_only, drawn],
                api_name="critic_detail_redraw", api_visibility="undocumented", show_progress="hidden")

    held_as = gr.State(None)  # the name this session's lease was taken under

    def opened(run_id, it, key, name, was, request: gr.Request):  # the curator takes the verdict's lease
        # Only a page that may curate the run holds its verdicts: on a Space a visitor walking another's held them
        # against their owner, whose decisions were then refused.
        who = leasing_name(ctx, name, request) if may_curate(ctx, run_id, request) else None
        return claim_note(ctx, "verdict", run_id, it, key, who, was)

    named = own_change(ctx.renamed, "critic_claim_on_name")
    gr.on([pick.change, named], opened, [ctx.run, ctx.iteration, pick, ctx.curator, held_as],
          [lease, held_as], api_name="critic_claim", api_visibility="undocumented")

    after_action = [info, table, agreement, clamped]

    wire_walk(ctx, "verdict", pick, table, page, total_rows, prev_btn, next_btn, PAGE, queue.sessions, queue.walked,
              queue_inputs, [info, table, pick, total_rows, clamped])
    # The team's "reviewed N of M" between keys, and the agreement: both follow the team, one request a tick.
    wire_counters(ctx, "verdict", info, queue.sessions, also=(agreement, queue.agreement_tick))

    undo.click(guarded_undo(ctx, undo_handler(ctx, undo_message), "verdict"), [ctx.run, ctx.iteration, ctx.curator],
               result, api_name="critic_undo", show_progress=quiet).success(
        queue.reload, filters, after_action, api_name="critic_undo_reload", api_visibility="undocumented",
        show_progress=QUEUE_PROGRESS).then(
        view, [ctx.run, ctx.iteration, pick], detail, api_name="critic_undo_detail", api_visibility="undocumented")

    for action, btn in acts.items():
        btn.click(act(action), [ctx.run, ctx.iteration, pick, ctx.curator, reason], result,
                  api_name=f"critic_{action}", show_progress=quiet).success(
            queue.reload, filters, after_action, api_name=f"critic_{action}_reload",
            api_visibility="undocumented", show_progress=QUEUE_PROGRESS).then(
            view, [ctx.run, ctx.iteration, pick], detail, api_name=f"critic_{action}_detail",
            api_visibility="undocumented")
    preview_btn.click(lambda r, k, a: preview_edit(ctx.store, r, k, a) if r and k else "", [ctx.run, pick, edit],
                      result, api_name="critic_preview_edit")
    save_btn.click(on_save, [ctx.run, ctx.iteration, pick, edit, ctx.curator, reason], result,
                   api_name="critic_save_edit", show_progress=quiet).success(
        queue.reload, filters, after_action, api_name="critic_save_edit_reload", api_visibility="undocumented",
        show_progress=QUEUE_PROGRESS).then(  # the saved edit is drawn, as every other decision's outcome is
        view, [ctx.run, ctx.iteration, pick], detail, api_name="critic_save_edit_detail",
        api_visibility="undocumented")
