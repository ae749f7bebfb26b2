"""Pairs tab: the effective DPO pairs of an iteration, filtered and paginated in SQL (``Store.pairs_page``); a
side-by-side view of prompt / chosen / rejected with both log-PPLs; curator actions (swap, exclude, tie, choose two
other plans, restore) through ``engine.curation`` (looks right and undo: ``engine.review_trail``); a margin
histogram and the chosen-vs-rejected length bias.

Keyboard (``studio.keys``): j/k next/previous pair (across pages), y looks right (recorded as ``reviewed``), s swap,
x exclude, t tie, r restore, v evidence, u undo this curator's last action. The pair picker names a pair by
its question, step and plan numbers; the evidence (``studio.evidence``) shades the gold actions by the grounder's
per-token surprisal under each plan, computed on demand and cached.

A GRPO iteration (``stages.planner_objective = grpo``) also shows, under the pair, the task's rollouts with their
rewards and advantages (``pair_group``), so a DPO pair and a GRPO group of one task read side by side.

Handlers: ``pairs_table``, ``pair_detail``, ``pair_group``, ``pair_evidence``, ``pair_action`` (its status line names
the pair as the picker does, never by its ``task|step|pair_idx`` key, and the other curator's decision it replaced:
", replacing ana's swap"; ``action_handler`` is the buttons' wrapper:
a user's mistake is a ``studio.common.user_error``), ``margin_figure``, ``length_figure``,
``curation_markdown`` (per iteration: the curators' actions, which ones the planner checkpoint was trained with, the
margins before/after curation and TRL's DPO reward margins; endpoint ``/pairs_curation``);
the walk and the undo are ``studio.keys.wire_walk`` / ``undo_handler``. API endpoints (``gradio_client``):
``/pairs_search`` (any filter change: one ``always_last`` event), ``/pairs_detail`` (with the GRPO group),
``/pairs_evidence`` and
``/pairs_<action>`` for swap, exclude, tie, choose and restore, ``/pairs_undo`` (writes); the refreshes after an
action (``/pairs_<action>_reload``, ``/pairs_<action>_detail``), ``/pairs_claim``, ``/pairs_next``, ``/pairs_prev``,
the queue's refresh after them (``/pairs_next_reload``, ``/pairs_prev_reload``: the table and its line, no charts, so
another curator's decision shows at the next key press), the team counters' timer (``/pairs_counters``,
``/pairs_counters_on``: ``studio.team_counters``) and ``/pairs_select_row`` are undocumented. The Search / Min / Max
boxes filter on Enter.

The table's second column is the pair's step: an iterative run (``sample.formulation = iterative``) pairs each
task-step, and two steps of one task otherwise read alike (its key, first, is clipped on screen); a onetime run's
pairs are all step 0. A row click picks by the key in the row's first cell, whatever the order or filter.

*Choose these plans* picks from the pair's plans (``plan_choices``: log-PPL, "same text as k=0"), filled with the
shown pair's own chosen/rejected k on every pair change (``choose_fields``); after an action the picker's label
follows the pair (``page_labels``); an empty queue says why (``empty_note``); a page past the last shows the last
(``studio.picks.clamped_page``); the buttons that need a pair are off while none is shown.

On a Hugging Face Space a page curates only the runs it created (``studio.curation_rights``): every write endpoint
(the actions, undo) refuses any other run server side, its buttons stay off, a pick there takes no lease, and a line
under the picker (drawn with the pair's detail and after every load) says why and to start one's own run instead.

The queue's reads live in ``studio.pairs_queue``, its refreshes (the load, the action reloads, the walk's refresh:
which filters they apply, and nothing painted over a newer read) in ``studio.pairs_refresh``, and the charts and
curation table in ``studio.pairs_charts`` (re-exported here: this module is the tab's handler surface).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gradio as gr

from engine import curation, review_trail
from engine.rollouts import task_group
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
from studio.curation_rights import check_curation, guarded_undo, may_curate, read_only_notice
from studio.evidence import pair_evidence_html
from studio.keys import QUEUE_PROGRESS, action_words, button_words, undo_handler, wire_walk
from studio.live_views import watch
from studio.pairs_charts import curation_markdown as curation_markdown
from studio.pairs_charts import length_figure as length_figure
from studio.pairs_charts import margin_figure as margin_figure
from studio.pairs_queue import (
    COLUMNS as COLUMNS,
)
from studio.pairs_queue import (
    PAGE as PAGE,
)
from studio.pairs_queue import (
    WIDTHS as WIDTHS,
)
from studio.pairs_queue import (
    _effective_pair as _effective_pair,
)
from studio.pairs_queue import (
    choose_fields as choose_fields,
)
from studio.pairs_queue import (
    empty_note as empty_note,
)
from studio.pairs_queue import (
    excerpt as excerpt,
)
from studio.pairs_queue import (
    number as number,
)
from studio.pairs_queue import (
    page_labels as page_labels,
)
from studio.pairs_queue import (
    pair_detail as pair_detail,
)
from studio.pairs_queue import (
    pair_key as pair_key,
)
from studio.pairs_queue import (
    pair_label as pair_label,
)
from studio.pairs_queue import (
    pair_name as pair_name,
)
from studio.pairs_queue import (
    pairs_table as pairs_table,
)
from studio.pairs_queue import (
    parse_key as parse_key,
)
from studio.pairs_queue import (
    plan_choices as plan_choices,
)
from studio.pairs_queue import (
    replaced_note,
)
from studio.pairs_refresh import PairsRefresh
from studio.picker import Picker
from studio.picks import first_cell
from studio.queue_lines import missed_training
from studio.relay import own_change
from studio.remember import remember
from studio.render import md_escaped, static_table_css
from studio.rollout_view import group_table
from studio.team_counters import wire_counters


def pair_group(store: Store, run_id: str | None, iteration: int | None, key: str | None) -> str:
    """The GRPO rollouts of the picked pair's task in this iteration (``engine.rollouts``), best advantage first,
    each with its named rewards; empty for a DPO iteration (nothing is drawn)."""
    if not (run_id and key) or iteration is None:
        return ""
    task_id, _, _ = parse_key(key)
    rows = task_group(store, run_id, int(iteration), task_id)
    if not rows:
        return ""
    return (f"<p><b>GRPO group of this task</b> ({len(rows)} rollouts the trainer sampled and scored in this "
            "iteration; advantage = reward against the group's)</p>" + group_table(rows, "plan"))


def pair_evidence(store: Store, service, run_id: str | None, iteration: int | None, key: str | None) -> str:
    """The evidence block of one pair (``studio.evidence``), or a line saying why there is none."""
    if not (run_id and key) or iteration is None:
        return "<p>Pick a pair first.</p>"
    task_id, step, idx = parse_key(key)
    eff = store.effective_pairs(run_id, int(iteration), task_id=task_id)
    eff = eff[(eff["step"] == step) & (eff["pair_idx"] == idx)]
    if not len(eff):
        return "<p>This pair no longer exists.</p>"
    pair = eff.iloc[0]
    return pair_evidence_html(store, service, run_id, int(iteration), task_id, step, int(pair["chosen_k"]),
                              int(pair["rejected_k"]))


def pair_action(store: Store, run_id: str, iteration: int, key: str, action: str, curator: str,
                chosen_k: int | None = None, rejected_k: int | None = None, reason: str = "") -> str:
    """Apply one curator action (swap | exclude | tie | choose | restore | reviewed) and say what happened, naming
    the pair as the picker does (``pair_name``)."""
    task_id, step, idx = parse_key(key)
    kw = {"pair_idx": idx, "curator": curator, "reason": reason}
    fns = {"swap": curation.swap_pair, "exclude": curation.exclude_pair, "tie": curation.tie_pair,
           "restore": curation.restore_pair}
    if action == "reviewed":  # looked at, left as it is
        oid = review_trail.mark_reviewed(store, run_id, int(iteration), "pair", task_id, step, idx, curator=curator,
                                     reason=reason)
    elif action == "choose":
        if chosen_k is None or rejected_k is None:
            raise ValueError("Pick the chosen and the rejected plan first (the two lists beside the button).")
        oid = curation.choose_pair(store, run_id, int(iteration), task_id, step, int(chosen_k), int(rejected_k), **kw)
    else:
        oid = fns[action](store, run_id, int(iteration), task_id, step, **kw)
    # Named by the state after the action: a swap reads "plan 3 over 0" where the picker said "plan 0 over 3". The
    # decision it replaced is named too (", replacing ana's swap"): the table shows only the latest. The override id
    # stays last: clients read it from the line's end.
    # While the iteration's planner trains, it has read the pairs already: the line says the decision misses it.
    note = (replaced_note(review_trail.replaced_decision(store, oid), action, curator)
            + missed_training(store, run_id, int(iteration), "pair"))
    return (f"{button_words(action)} recorded for {md_escaped(pair_name(store, run_id, int(iteration), key))}{note} "
            f"(by {md_escaped(curator)}, override #{oid}).")


def action_handler(ctx: Ctx, action: str) -> Callable[..., str]:
    """The handler of one action button (``/pairs_<action>``): refused in a read-only studio, for a viewer and, on a
    Space, on a run this page did not create (``studio.curation_rights``); a user's mistake (no pair picked, no
    curator name, plan numbers the engine refuses) is a ``user_error``."""
    def handler(run_id, it, key, name, c, r, why, request: gr.Request) -> str:
        check_curation(ctx, run_id, request, "pair")
        if not key:
            raise user_error("Pick a pair first.")
        curator = curator_of(name, request)
        check_lease(ctx, "pair", run_id, it, key, curator)
        with user_errors():
            return pair_action(ctx.store, run_id, it, key, action, curator, c, r, why)
    return handler


def undo_message(store: Store, run_id: str | None, iteration: int | None, curator: str,
                 guard: Callable[[dict[str, Any]], None] | None = None) -> str:
    """Undo ``curator``'s last action on this iteration's pairs (``engine.review_trail.undo_last``) and say which."""
    if not run_id or iteration is None:
        raise ValueError("Pick a run and an iteration first.")
    row = review_trail.undo_last(store, run_id, int(iteration), curator, "pair", guard=guard)
    question = excerpt(store.get_task(run_id, row["task_id"]).question)
    step = f" at step {int(row['step'])}" if row.get("step") else ""
    return (f"Undid your {action_words(row['action'])} of the pair{step} for “{md_escaped(question)}” "
            f"(override #{int(row['override_id'])}).")


def build(ctx: Ctx) -> None:
    with gr.Row():
        text = gr.Textbox(label="Search", scale=2, elem_id="pairs-search")
        min_m = gr.Textbox(label="Min margin", placeholder="any")
        max_m = gr.Textbox(label="Max margin", placeholder="any")
        order = gr.Dropdown([("task", "task"), ("smallest margin first", "margin"),
                             ("largest margin first", "-margin"), ("length bias first", "length"),
                             ("not reviewed yet first", "unreviewed"), ("shuffled (audit)", "shuffled")],
                            value="task", label="Order", elem_id="pairs-order")
    with gr.Row():
        overridden, excluded, ties = (gr.Radio(["any", "yes", "no"], value="any", label=lbl)
                                      for lbl in ("Overridden", "Excluded", "Ties"))
        page = gr.Number(1, label="Page", precision=0, minimum=1)
    info = gr.Markdown(elem_id="pairs-info")
    table = gr.Dataframe(interactive=False, elem_id="pairs-table", max_height=320, column_widths=WIDTHS)
    gr.HTML(static_table_css("pairs-table"), visible="hidden", js_on_load=None)  # a click picks: no edit-box look
    total_rows = gr.State(0)
    with gr.Row():
        prev_btn = gr.Button("◀ Previous (k)", elem_id="pairs-prev", size="sm", scale=0)
        pair = Picker([], label="Pair", elem_id="pairs-pick", scale=4)
        next_btn = gr.Button("Next (j) ▶", elem_id="pairs-next", size="sm", scale=0)
    lease = gr.Markdown(elem_id="pairs-lease")
    # On a Space, why this run is read-only for this page and what to do instead (studio.curation_rights).
    read_only = gr.Markdown(elem_id="pairs-read-only")
    with gr.Row():
        prompt = gr.HTML(elem_id="pairs-prompt")
        chosen, rejected = gr.HTML(elem_id="pairs-chosen"), gr.HTML(elem_id="pairs-rejected")
    with gr.Row():
        acts = {a: gr.Button(a.capitalize() + f" ({a[0] if a != 'exclude' else 'x'})", elem_id=f"pairs-{a}",
                             interactive=not ctx.read_only) for a in ("swap", "exclude", "tie", "restore")}
        acts["reviewed"] = gr.Button("Looks right (y)", elem_id="pairs-reviewed", interactive=not ctx.read_only)
        # Filled with the shown pair's plans and its own chosen/rejected k on every pair change (choose_fields).
        ck = Picker([], label="Choose: chosen plan", elem_id="pairs-choose-chosen")
        rk = Picker([], label="rejected plan", elem_id="pairs-choose-rejected")
        choose = gr.Button("Choose these plans", elem_id="pairs-choose", interactive=not ctx.read_only)
        undo = gr.Button("Undo my last (u)", elem_id="pairs-undo", interactive=not ctx.read_only)
        ctx.write_controls += [*acts.values(), choose, undo]  # off for a viewer (studio.app)
    reason = gr.Textbox(label="Reason (optional)")
    status = gr.Markdown(elem_id="pairs-status")
    evidence_btn = gr.Button("Evidence: where the grounder gets lost (v)", elem_id="pairs-evidence", size="sm")
    evidence = gr.HTML(elem_id="pairs-evidence-view")
    group = gr.HTML(elem_id="pairs-group")  # GRPO iterations only: the task's rollouts beside its DPO pair
    with gr.Row():
        # No label: gradio's default "Plot" said nothing and took a line of height above each chart (titled already).
        hist, bias = gr.Plot(show_label=False), gr.Plot(show_label=False)
    summary = gr.Markdown(elem_id="pairs-curation")

    filters = [ctx.run, ctx.iteration, min_m, max_m, text, overridden, excluded, ties, order, page]
    # The Search / Min / Max text the last load applied (studio.pairs_refresh): the action reloads and the walk's
    # refresh read the queue through it, never through text typed and not submitted.
    applied = gr.State(None)
    # Those reads: the run, the iteration, the filters as applied and the page.
    queue_inputs = [ctx.run, ctx.iteration, applied, overridden, excluded, ties, order, page]
    # The queue reloads by itself once a stage it reads (pairs, train_planner) ends for the view (studio.live_views).
    live = watch(ctx, "pairs")
    queue = PairsRefresh(ctx, order.elem_id, live)  # its reads and refreshes, per session (studio.pairs_refresh)
    remember(ctx, "pairs", {"text": (text, [text.submit]), "min_margin": (min_m, [min_m.submit]),
                            "max_margin": (max_m, [max_m.submit]), "order": (order, [order.change]),
                            "overridden": (overridden, [overridden.change]), "excluded": (excluded, [excluded.change]),
                            "ties": (ties, [ties.change])})

    outputs = [info, table, pair, hist, bias, total_rows, applied, page]
    # One event for every filter change (in order per session: see studio.app.CONCURRENCY), one named endpoint.
    # The view key's change as this event's own trigger (studio.relay: a shared one re-ran every tab's load).
    on_view = own_change(ctx.view, "pairs_search_on_view")
    on_name = own_change(ctx.renamed, "pairs_search_on_name")  # a name typed mid-session (Ctx.renamed)
    search = gr.on([text.submit, min_m.submit, max_m.submit, order.change, overridden.change, excluded.change,
                    ties.change, page.change, on_view, on_name, live.trigger.change], queue.load,
                   [*filters, pair, ctx.curator], outputs,
                   api_name="pairs_search", trigger_mode="always_last", show_progress=QUEUE_PROGRESS)
    table.select(first_cell, None, pair, api_name="pairs_select_row", api_visibility="undocumented")
    # Every load and reload of the queue redraws the table: the summary follows each action without its own wiring.
    table.change(lambda run_id: curation_markdown(ctx.store, run_id), ctx.run, summary, show_progress="hidden",
                 api_name="pairs_curation", trigger_mode="always_last")
    # A new pick: its evidence is cleared until asked for (v), and the Choose pickers are emptied until its detail
    # fills them (a press in between asks for the plans instead of pairing the new task's plans by the previous
    # pair's numbers). Both run in the browser at the moment of the change, so a `v` pressed right after `j` can
    # never be wiped by it. Registered before the detail: the page runs a change's listeners in order, and a js-only
    # listener after it ran once the detail had answered, emptying the pickers it had just filled.
    pair.change(None, None, [evidence, ck, rk], js="() => ['', null, null]", api_name="pairs_evidence_clear",
                api_visibility="undocumented")
    # The GRPO group (empty for DPO iterations) comes with the pair's detail: one event per pick, not two.
    # The *Choose* pickers start from the shown pair (choose_fields), and the buttons that need a pair are off while
    # none is shown (no extra event: they come with the detail).
    needs_pair = [*acts.values(), choose, evidence_btn]

    drawn = gr.State(None)  # [run, iteration, key] the pair's view was last drawn for

    def detail(run_id, it, key, request: gr.Request | None = None):
        # The write buttons come on with a pick only where the session may curate the run (a viewer's stay off, as
        # the load handler left them; on a Space, those of a run this page did not create: studio.curation_rights);
        # the evidence (last in needs_pair) is a read, for everyone.
        on = gr.update(interactive=bool(key) and may_curate(ctx, run_id, request))
        look = gr.update(interactive=bool(key))
        return (*pair_detail(ctx.store, run_id, it, key), pair_group(ctx.store, run_id, it, key),
                *choose_fields(ctx.store, run_id, it, key), *[on] * (len(needs_pair) - 1), look,
                read_only_notice(ctx, run_id, request, "pair"), [run_id, it, key])

    shown_outputs = [prompt, chosen, rejected, group, ck, rk, *needs_pair, read_only, drawn]
    pair.change(detail, [ctx.run, ctx.iteration, pair], shown_outputs, api_name="pairs_detail")

    def redraw(run_id, it, key, was, request: gr.Request | None = None):
        """After the queue reloads: the same key in another iteration or run (task|step|pair_idx recurs in every
        iteration) changes no picker value, so no pair change drew it: the view showed the previous iteration's
        plans while the buttons acted on this one's. Drawn here when what is shown is not what is picked. The
        read-only notice follows every load: a run switch that changes no pick (an empty queue) must still say it."""
        if not key or was == [run_id, it, key]:
            # the evidence and shown_outputs up to the line skipped, the line, the drawn key skipped
            return (*(gr.skip(),) * (len(shown_outputs) - 1), read_only_notice(ctx, run_id, request, "pair"),
                    gr.skip())
        return ("", *detail(run_id, it, key, request))

    search.then(redraw, [ctx.run, ctx.iteration, pair, drawn], [evidence, *shown_outputs],
                api_name="pairs_detail_redraw", api_visibility="undocumented", show_progress="hidden")
    # A new pick: the curator takes the pair's lease.
    held_as = gr.State(None)  # the name this session's lease was taken under

    def opened(run_id, it, key, name, was, request: gr.Request):
        # A page that may not curate the run holds nothing in it: on a Space a visitor walking another's pairs held
        # them against their owner, whose decisions were then refused.
        who = leasing_name(ctx, name, request) if may_curate(ctx, run_id, request) else None
        return claim_note(ctx, "pair", run_id, it, key, who, was)

    # And when the name is given: the pair a curator lands on before typing a name was held by nobody.
    named = own_change(ctx.renamed, "pairs_claim_on_name")
    gr.on([pair.change, named], opened, [ctx.run, ctx.iteration, pair, ctx.curator, held_as],
          [lease, held_as], api_name="pairs_claim", api_visibility="undocumented")
    evidence_btn.click(lambda r, i, k: pair_evidence(ctx.store, ctx.evidence, r, i, k),
                       [ctx.run, ctx.iteration, pair], evidence, api_name="pairs_evidence")

    wire_walk(ctx, "pair", pair, table, page, total_rows, prev_btn, next_btn, PAGE, queue.sessions, queue.walked,
              queue_inputs, [info, table, pair, total_rows, page])
    wire_counters(ctx, "pair", info, queue.sessions)  # the team's "reviewed N of M", kept current between keys

    after_action = [info, table, pair, hist, bias, page]
    shown_pair = [prompt, chosen, rejected, ck, rk]

    def shown(run_id, it, key):  # the pair's detail and its Choose pickers after an action
        return (*pair_detail(ctx.store, run_id, it, key), *choose_fields(ctx.store, run_id, it, key))

    # A refusal (no curator name, a bad plan number) is a toast; with the progress shown, Gradio would also stamp a
    # red "Error" over the status line, above the previous action's message (as on the Critic tab).
    undo.click(guarded_undo(ctx, undo_handler(ctx, undo_message), "pair"), [ctx.run, ctx.iteration, ctx.curator],
               status, api_name="pairs_undo", show_progress="hidden").success(
        queue.reload, [*queue_inputs, pair, ctx.curator], after_action, api_name="pairs_undo_reload",
        api_visibility="undocumented", show_progress=QUEUE_PROGRESS).then(
        shown, [ctx.run, ctx.iteration, pair], shown_pair, api_name="pairs_undo_detail",
        api_visibility="undocumented")

    for action, btn in [*acts.items(), ("choose", choose)]:
        btn.click(action_handler(ctx, action), [ctx.run, ctx.iteration, pair, ctx.curator, ck, rk, reason], status,
                  api_name=f"pairs_{action}", show_progress="hidden").success(
            queue.reload, [*queue_inputs, pair, ctx.curator], after_action, api_name=f"pairs_{action}_reload",
            api_visibility="undocumented", show_progress=QUEUE_PROGRESS).then(
            shown, [ctx.run, ctx.iteration, pair], shown_pair, api_name=f"pairs_{action}_detail",
            api_visibility="undocumented")
