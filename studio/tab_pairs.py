"""Pairs tab: the effective DPO pairs of an iteration, filtered and paginated in SQL (``Store.pairs_page``); a
side-by-side view of prompt / chosen / rejected with both log-PPLs; curator actions (swap, exclude, tie, choose two
other plans, restore) through ``engine.curation``; a margin histogram and the chosen-vs-rejected length bias.

Keyboard (``studio.keys``): j/k next/previous pair (across pages), s swap, x exclude, t tie, r restore, v evidence,
u undo this curator's last action. The pair picker names a pair by
its question, step and plan numbers; the evidence (``studio.evidence``) shades the gold actions by the grounder's
per-token surprisal under each plan, computed on demand and cached.

A GRPO iteration (``stages.planner_objective = grpo``) also shows, under the pair, the task's rollouts with their
rewards and advantages (``pair_group``), so a DPO pair and a GRPO group of one task read side by side.

Handlers: ``pairs_table``, ``pair_detail``, ``pair_group``, ``pair_evidence``, ``pair_action`` (its status line names
the pair as the picker does, never by its ``task|step|pair_idx`` key; ``action_handler`` is the buttons' wrapper:
a user's mistake is a ``studio.common.user_error``), ``margin_figure``, ``length_figure``,
``curation_markdown`` (per iteration: the curators' actions, which ones the planner checkpoint was trained with, the
margins before/after curation and TRL's DPO reward margins; endpoint ``/pairs_curation``);
the walk and the undo are ``studio.keys.wire_walk`` / ``undo_handler``. API endpoints (``gradio_client``):
``/pairs_search`` (any filter change: one ``always_last`` event), ``/pairs_detail`` (with the GRPO group),
``/pairs_evidence`` and
``/pairs_<action>`` for swap, exclude, tie, choose and restore, ``/pairs_undo`` (writes); the refreshes after an
action (``/pairs_<action>_reload``, ``/pairs_<action>_detail``), ``/pairs_claim``, ``/pairs_next``, ``/pairs_prev``
and ``/pairs_select_row`` are undocumented.
"""

from __future__ import annotations

import html
from collections.abc import Callable

import gradio as gr
import pandas as pd
import plotly.graph_objects as go

from engine import curation
from engine.curation_summary import pair_curation_summary
from engine.rollouts import task_group
from engine.store import Store
from studio.common import (
    Ctx,
    check_writable,
    curator_of,
    first_cell,
    lease_note,
    page_info,
    pick_update,
    pre,
    review_line,
    tri,
    user_error,
    user_errors,
    who_of,
    word_diff_html,
)
from studio.evidence import pair_evidence_html
from studio.keys import QUEUE_PROGRESS, action_words, undo_handler, wire_walk
from studio.picker import Picker
from studio.remember import remember
from studio.rollout_view import group_table

PAGE = 20
# The key (task|step|pair_idx) stays first, narrow (clipped on screen, whole in the cell): a row click reads the first
# cell (studio.common.first_cell). The short columns a curator decides by come next, each wide enough for its header,
# then the question in a capped width (WIDTHS; one line per row): at ~1400 px an uncapped question pushed margin and
# override off the screen. The two log-PPLs (also in the pair's view) come last.
COLUMNS = ["key", "chosen_k", "rejected_k", "margin", "override_action", "curator", "domain", "question",
           "chosen_logppl", "rejected_logppl"]
WIDTHS = ["150px", "105px", "125px", "85px", "180px", "100px", "90px", "320px", "160px", "175px"]



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
    """One page of effective pairs as display rows (``key`` = task|step|pair_idx) and the matching total."""
    if not run_id or iteration is None:
        return pd.DataFrame(columns=COLUMNS), 0
    df = store.pairs_page(run_id, int(iteration), min_margin=min_margin, max_margin=max_margin, text=text or None,
                          overridden=tri(overridden), excluded=tri(excluded), ties=tri(ties), order=order,
                          limit=size, offset=(max(int(page), 1) - 1) * size)
    total = int(df["total"].iloc[0]) if len(df) else 0
    df = df.assign(key=[pair_key(*r) for r in zip(df["task_id"], df["step"], df["pair_idx"])])
    return df[COLUMNS].round({"chosen_logppl": 4, "rejected_logppl": 4, "margin": 4}), total


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
    head = (f"<p>{html.escape(label)} · margin {pair['margin']:.4f} · {flags}"
            f"{' · ' + str(pair['override_action']) if pair['overridden'] else ''}</p>")
    diff = (word_diff_html(chosen.text, rejected.text) if chosen is not None and rejected is not None else "")
    return (head + pre(chosen.prompt if chosen else ""),
            f"<b>chosen k={pair['chosen_k']} · log-PPL {pair['chosen_logppl']:.4f}</b>" + pre(chosen and chosen.text),
            f"<b>rejected k={pair['rejected_k']} · log-PPL {pair['rejected_logppl']:.4f}</b>"
            + pre(rejected and rejected.text) + "<p><i>chosen → rejected, word by word:</i></p>" + diff)


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
        oid = curation.mark_reviewed(store, run_id, int(iteration), "pair", task_id, step, idx, curator=curator,
                                     reason=reason)
    elif action == "choose":
        if chosen_k is None or rejected_k is None:
            raise ValueError("choose needs both plan numbers")
        oid = curation.choose_pair(store, run_id, int(iteration), task_id, step, int(chosen_k), int(rejected_k), **kw)
    else:
        oid = fns[action](store, run_id, int(iteration), task_id, step, **kw)
    # Named by the state after the action: a swap reads "plan 3 over 0" where the picker said "plan 0 over 3".
    what = "looks right (reviewed)" if action == "reviewed" else action  # the button's words
    return (f"{what} recorded for {pair_name(store, run_id, int(iteration), key)} "
            f"(by {curator}, override #{oid}).")


def action_handler(ctx: Ctx, action: str) -> Callable[..., str]:
    """The handler of one action button (``/pairs_<action>``): refused in a read-only studio or for a viewer; a
    user's mistake (no pair picked, no curator name, plan numbers the engine refuses) is a ``user_error``."""
    def handler(run_id, it, key, name, c, r, why, request: gr.Request) -> str:
        check_writable(ctx, request)
        if not key:
            raise user_error("Pick a pair first.")
        with user_errors():
            return pair_action(ctx.store, run_id, it, key, action, curator_of(name, request), c, r, why)
    return handler


def undo_message(store: Store, run_id: str | None, iteration: int | None, curator: str) -> str:
    """Undo ``curator``'s last action on this iteration's pairs (``engine.curation.undo_last``) and say which."""
    if not run_id or iteration is None:
        raise ValueError("Pick a run and an iteration first.")
    row = curation.undo_last(store, run_id, int(iteration), curator, "pair")
    question = excerpt(store.get_task(run_id, row["task_id"]).question)
    return (f"Undid your {action_words(row['action'])} of the pair for “{question}” "
            f"(override #{int(row['override_id'])}).")


def _pair_stats(store: Store, run_id: str, iteration: int) -> pd.DataFrame:
    return store.pair_stats(run_id, int(iteration))  # read from the materialised pairs (engine.pair_view)


def margin_figure(store: Store, run_id: str | None, iteration: int | None,
                  stats: pd.DataFrame | None = None) -> go.Figure:
    """Histogram of the effective pairs' margins; ``stats`` (``_pair_stats``) when the caller already has them."""
    fig = go.Figure()
    if run_id and iteration is not None:
        fig.add_histogram(x=(_pair_stats(store, run_id, iteration) if stats is None else stats)["margin"], nbinsx=30)
    fig.update_layout(title="Margin (rejected − chosen log-PPL)", height=300, margin=dict(l=40, r=10, t=40, b=40))
    return fig


def length_figure(store: Store, run_id: str | None, iteration: int | None,
                  stats: pd.DataFrame | None = None) -> go.Figure:
    """Chosen vs rejected plan length (characters): points above the diagonal = the rule prefers longer plans."""
    fig = go.Figure()
    if run_id and iteration is not None:
        df = _pair_stats(store, run_id, iteration) if stats is None else stats
        fig.add_scatter(x=df["rejected_len"], y=df["chosen_len"], mode="markers", name="pairs")
        top = float(max(df["chosen_len"].max(), df["rejected_len"].max())) if len(df) else 1.0
        fig.add_scatter(x=[0, top], y=[0, top], mode="lines", name="equal", line=dict(dash="dot"))
        bias = (df["chosen_len"] - df["rejected_len"]).mean() if len(df) else 0.0
        fig.update_layout(title=f"Length bias: chosen − rejected = {bias:+.1f} chars on average")
    fig.update_layout(xaxis_title="rejected length", yaxis_title="chosen length", height=300,
                      margin=dict(l=40, r=10, t=40, b=40))
    return fig


def _fmt(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:+.{digits}f}"


def curation_markdown(store: Store, run_id: str | None) -> str:
    """Per iteration: the curators' pair actions, which of them the planner's checkpoint was trained with, how many
    pairs a re-training would change (``pending``), the log-PPL margins before/after curation and TRL's DPO reward
    margins (``engine.curation_summary``)."""
    rows = pair_curation_summary(store, run_id) if run_id else []
    if not rows:
        return ""
    lines = ["**Curation per iteration** (DPO reward margin: TRL's implicit reward of chosen over rejected, first → "
             "last logged step, and the share of pairs it ranks right at the end)", "",
             "| iteration | pairs | reviewed | swaps | excludes | ties | chosen by hand | in the checkpoint | "
             "pairs changed since (re-train to use) | mean log-PPL margin: rule → trained | DPO reward margin |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        o, t, d = r["overrides"], r["trained_with"], r["dpo"]
        trained = "—" if t is None else f"{sum(t.values())} action(s)"
        dpo = "not trained" if d is None else (f"{d['first_margin']:+.3f} → {d['last_margin']:+.3f} "
                                               f"({100 * d['last_accuracy']:.0f}% right)")
        lines.append(f"| {r['iteration']} | {r['pairs']} | {r['reviewed']} | {o['swap']} | {o['exclude']} | "
                     f"{o['tie']} | {o['choose']} | {trained} | {'—' if r['pending'] is None else r['pending']} | "
                     f"{_fmt(r['margin_auto'])} → {_fmt(r['margin_trained'])} | {dpo} |")
    return "\n".join(lines)


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
    info = gr.Markdown()
    table = gr.Dataframe(interactive=False, elem_id="pairs-table", max_height=320, column_widths=WIDTHS)
    total_rows = gr.State(0)
    with gr.Row():
        prev_btn = gr.Button("◀ Previous (k)", elem_id="pairs-prev", size="sm", scale=0)
        pair = Picker([], label="Pair", elem_id="pairs-pick", scale=4)
        next_btn = gr.Button("Next (j) ▶", elem_id="pairs-next", size="sm", scale=0)
    lease = gr.Markdown(elem_id="pairs-lease")
    with gr.Row():
        prompt = gr.HTML(elem_id="pairs-prompt")
        chosen, rejected = gr.HTML(elem_id="pairs-chosen"), gr.HTML(elem_id="pairs-rejected")
    with gr.Row():
        acts = {a: gr.Button(a.capitalize() + f" ({a[0] if a != 'exclude' else 'x'})", elem_id=f"pairs-{a}",
                             interactive=not ctx.read_only) for a in ("swap", "exclude", "tie", "restore")}
        acts["reviewed"] = gr.Button("Looks right (y)", elem_id="pairs-reviewed", interactive=not ctx.read_only)
        ck = gr.Number(None, label="Choose: chosen k", precision=0)
        rk = gr.Number(None, label="rejected k", precision=0)
        choose = gr.Button("Choose these plans", elem_id="pairs-choose", interactive=not ctx.read_only)
        undo = gr.Button("Undo my last (u)", elem_id="pairs-undo", interactive=not ctx.read_only)
    reason = gr.Textbox(label="Reason (optional)")
    status = gr.Markdown(elem_id="pairs-status")
    evidence_btn = gr.Button("Evidence: where the grounder gets lost (v)", elem_id="pairs-evidence", size="sm")
    evidence = gr.HTML(elem_id="pairs-evidence-view")
    group = gr.HTML(elem_id="pairs-group")  # GRPO iterations only: the task's rollouts beside its DPO pair
    with gr.Row():
        hist, bias = gr.Plot(), gr.Plot()
    summary = gr.Markdown(elem_id="pairs-curation")

    filters = [ctx.run, ctx.iteration, min_m, max_m, text, overridden, excluded, ties, order, page]
    remember(ctx, "pairs", {"text": (text, [text.submit]), "min_margin": (min_m, [min_m.submit]),
                            "max_margin": (max_m, [max_m.submit]), "order": (order, [order.change]),
                            "overridden": (overridden, [overridden.change]), "excluded": (excluded, [excluded.change]),
                            "ties": (ties, [ties.change])})

    def load(run_id, it, lo, hi, txt, ov, ex, ti, od, pg, current, name, request: gr.Request):
        df, total = pairs_table(ctx.store, run_id, it, min_margin=number(lo), max_margin=number(hi), text=txt,
                                overridden=ov,
                                excluded=ex, ties=ti, order=od, page=int(pg or 1))
        keys = list(df["key"])
        labels = [(pair_label(q, k, c, r), k) for q, k, c, r in zip(df["question"], keys, df["chosen_k"],
                                                                     df["rejected_k"])]
        # Both charts from one stats query: this page is the one every curator reloads after each action.
        stats = _pair_stats(ctx.store, run_id, it) if run_id and it is not None else None
        return (page_info(total, int(pg or 1), PAGE) + review_line(ctx.store, run_id, it, "pair",
                                                                   who_of(name, request)), df,
                pick_update(labels, keys, current),
                margin_figure(ctx.store, run_id, it, stats), length_figure(ctx.store, run_id, it, stats), total)

    outputs = [info, table, pair, hist, bias, total_rows]
    # One event for every filter change (in order per session: see studio.app.CONCURRENCY), one named endpoint.
    gr.on([text.submit, min_m.submit, max_m.submit, order.change, overridden.change, excluded.change, ties.change,
           page.change, ctx.iteration.change, ctx.run.change, ctx.curator.change], load, [*filters, pair, ctx.curator],
          outputs,
          api_name="pairs_search", trigger_mode="always_last", show_progress=QUEUE_PROGRESS)
    table.select(first_cell, None, pair, api_name="pairs_select_row", api_visibility="undocumented")
    # Every load and reload of the queue redraws the table: the summary follows each action without its own wiring.
    table.change(lambda run_id: curation_markdown(ctx.store, run_id), ctx.run, summary, show_progress="hidden",
                 api_name="pairs_curation", trigger_mode="always_last")
    # The GRPO group (empty for DPO iterations) comes with the pair's detail: one event per pick, not two.
    pair.change(lambda r, i, k: (*pair_detail(ctx.store, r, i, k), pair_group(ctx.store, r, i, k)),
                [ctx.run, ctx.iteration, pair], [prompt, chosen, rejected, group], api_name="pairs_detail")
    # A new pick: its evidence is cleared until asked for (v), and the curator takes the pair's lease. The clearing
    # runs in the browser at the moment of the change, so a `v` pressed right after `j` can never be wiped by it.
    def opened(run_id, it, key, name, request: gr.Request):
        return lease_note(ctx.leases.claim(("pair", run_id, it), key, who_of(name, request)) if key else None, "pair")

    pair.change(None, None, evidence, js="() => ''", api_name="pairs_evidence_clear",
                api_visibility="undocumented")
    pair.change(opened, [ctx.run, ctx.iteration, pair, ctx.curator], lease, api_name="pairs_claim",
                api_visibility="undocumented")
    evidence_btn.click(lambda r, i, k: pair_evidence(ctx.store, ctx.evidence, r, i, k),
                       [ctx.run, ctx.iteration, pair], evidence, api_name="pairs_evidence")

    wire_walk(ctx, "pair", pair, table, page, total_rows, prev_btn, next_btn, PAGE)

    def reload(run_id, it, lo, hi, txt, ov, ex, ti, od, pg, current, name, request: gr.Request):
        """After an action: refresh everything but the picked pair."""
        info_md, df, _, h, b, _total = load(run_id, it, lo, hi, txt, ov, ex, ti, od, pg, current, name, request)
        return info_md, df, h, b

    # A refusal (no curator name, a bad plan number) is a toast; with the progress shown, Gradio would also stamp a
    # red "Error" over the status line, above the previous action's message (as on the Critic tab).
    undo.click(undo_handler(ctx, undo_message), [ctx.run, ctx.iteration, ctx.curator], status,
               api_name="pairs_undo", show_progress="hidden").success(
        reload, [*filters, pair, ctx.curator], [info, table, hist, bias], api_name="pairs_undo_reload",
        api_visibility="undocumented", show_progress=QUEUE_PROGRESS).then(
        lambda r, i, k: pair_detail(ctx.store, r, i, k), [ctx.run, ctx.iteration, pair],
        [prompt, chosen, rejected], api_name="pairs_undo_detail", api_visibility="undocumented")

    for action, btn in [*acts.items(), ("choose", choose)]:
        btn.click(action_handler(ctx, action), [ctx.run, ctx.iteration, pair, ctx.curator, ck, rk, reason], status,
                  api_name=f"pairs_{action}", show_progress="hidden").success(
            reload, [*filters, pair, ctx.curator], [info, table, hist, bias], api_name=f"pairs_{action}_reload",
            api_visibility="undocumented", show_progress=QUEUE_PROGRESS).then(
            lambda r, i, k: pair_detail(ctx.store, r, i, k), [ctx.run, ctx.iteration, pair],
            [prompt, chosen, rejected], api_name=f"pairs_{action}_detail", api_visibility="undocumented")
