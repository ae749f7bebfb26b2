"""Plans tab: browse a run's tasks (search, domain, split; paginated in SQL) and a task's K plans in the chosen
iteration, sorted by log-PPL with bars and chosen/rejected marks, plus a word diff between any two plans. When
the grounder was trained by GRPO that iteration, its rollouts for the task's grounded plans follow
(``studio.rollout_view``).

An iteration whose sample stage has not finished (stopped, failed, or still running) holds plans for some of its
tasks only: the list's line and the plans view say so with the counts ("sampled 37 of 100 tasks; the sample stage
was stopped", ``partial_sampling``), so a part is not read as the whole iteration. The plans table comes in a
``moat-scroll`` box (``studio.app.TABLE_CSS``) that scrolls sideways on a phone, where the table is wider than the
screen.

Handlers: ``task_page``, ``plans_html``, ``partial_sampling``, ``diff_choices``, ``plan_diff``, ``grounder_rollouts``,
``no_tasks_reason``: plain functions of the store. A search that matches no task says so with its filters ("0 rows ·
no task matches the search “x”, domain maths ..."), as the Pairs and Critic queues say why they are empty. The diff
pickers name each plan by k and log-PPL (and step, in an iterative run) and start on the lowest- and highest-PPL
plans of the first step.
"""

from __future__ import annotations

import html
from typing import Any

import gradio as gr
import pandas as pd

from engine.errors import ConfigError
from engine.rollouts import task_group
from engine.schedule import iteration_config
from engine.store import Store
from engine.stored_config import stored_config
from studio.common import Ctx
from studio.live_views import watch
from studio.picker import Picker
from studio.picks import clamped_page, first_cell
from studio.queue_lines import queue_info
from studio.relay import own_change
from studio.render import md_escaped, plan_labels, word_diff_html
from studio.rollout_view import grounder_groups

PAGE = 20
# The plan count before the question, whose width is capped: after an uncapped question the count sat off-screen at
# ~1400 px, and a run's thousands of tasks without plans in the iteration looked like empty tasks.
WIDTHS = ["200px", "80px", "90px", "70px", "900px"]


def task_page(store: Store, run_id: str | None, iteration: int | None, text: str = "", domain: str = "",
              split: str = "", page: int = 1, size: int = PAGE) -> pd.DataFrame:
    """One page of tasks with how many plans they have in ``iteration`` (tasks with plans first); a ``total`` column
    counts all matches."""
    cols = ["task_id", "domain", "split", "plans", "question", "total", "with_plans"]
    if not run_id:
        return pd.DataFrame(columns=cols)
    return store.task_page(run_id, int(iteration or 0), text=text, domain=domain, split=split, page=page,
                           size=size)[cols]


def _planned_tasks(store: Store, run_id: str, iteration: int) -> int | None:
    """How many training tasks the iteration's sample stage sets out to sample (``data.train_limit`` of the run's
    train tasks, as ``StageContext.train_tasks`` picks them); None when the stored config no longer loads."""
    try:
        limit = iteration_config(stored_config((store.get_run(run_id) or {}).get("config") or {}),
                                 int(iteration)).data.train_limit
    except (ConfigError, TypeError, ValueError):
        return None
    train = store.count("tasks", run_id, split="train")
    return min(limit, train) if limit else train


def partial_sampling(store: Store, run_id: str | None, iteration: int | None) -> str:
    """The sentence saying that ``iteration`` holds plans for only some of its tasks, because its sample stage was
    stopped, failed, or has not finished yet ("Iteration 1 is partial: sampled 37 of 100 tasks; the sample stage was
    stopped ..."); "" when its sample stage is done, has not started, or the iteration samples nothing (0)."""
    if not run_id or iteration is None:
        return ""
    state = store.stage_status(run_id, int(iteration)).get("sample")
    status = state["status"] if state else None
    why = {"stopped": "the sample stage was stopped (the Run tab's “Next stage” resumes it)",
           "failed": "the sample stage failed (the Run tab shows why)",
           "running": "the sample stage has not finished (still running, or interrupted)"}.get(str(status))
    if why is None:
        return ""
    sampled = int(store.query("SELECT count(DISTINCT task_id) AS n FROM plans WHERE run_id = ? AND iteration = ?",
                              [run_id, int(iteration)])["n"].iloc[0])
    planned = _planned_tasks(store, run_id, int(iteration))
    if planned is not None and sampled >= planned:  # every task sampled: stopped after its last batch
        return ""
    of = f" of {planned}" if planned is not None else ""
    return f"Iteration {int(iteration)} is partial: sampled {sampled}{of} tasks; {why}."


def plans_html(store: Store, run_id: str | None, iteration: int | None, task_id: str | None) -> str:
    """The task's plans (best log-PPL first) as an HTML table with a bar per plan and chosen/rejected badges, in a
    box that scrolls sideways where the screen is narrower than the table; led by ``partial_sampling``'s sentence
    when the iteration's sampling was cut short."""
    if run_id and task_id and iteration is None:
        # A run whose first stage is still running has no iteration to pick yet (seen on a first visit).
        return "<p>No iteration picked: the run has none with plans yet. Pick one above once its first stage ends.</p>"
    if not (run_id and iteration is not None and task_id):
        return "<p>Pick a task.</p>"
    plans = store.task_plans(run_id, int(iteration), task_id)
    partial = partial_sampling(store, run_id, iteration)
    lead = f"<p class='moat-partial'>⚠ {html.escape(partial)}</p>" if partial else ""
    if not len(plans):
        try:
            split = store.get_task(run_id, task_id).split
        except KeyError:  # an id from the page that this run does not have
            split = "train"
        why = "" if split == "train" else (f": MOAT samples plans for training tasks only, and this is a {split} task "
                                           "(the evaluation plans it greedily)")
        return f"{lead}<p>No plans for {html.escape(task_id)} in iteration {iteration}{html.escape(why)}.</p>"
    # Bars are scaled within each step: an iterative run's steps score different gold actions, so their log-PPLs
    # are not on one scale.
    lo, hi = plans.groupby("step")["logppl"].min(), plans.groupby("step")["logppl"].max()
    rows = []
    for r in plans.itertuples(index=False):
        scored = pd.notna(r.logppl)
        low, high = lo.get(r.step), hi.get(r.step)
        width = 10 + 90 * ((r.logppl - low) / (high - low) if high > low else 0.5) if scored else 0
        badge = ("<b style='color:#070'>chosen</b>" if r.chosen else "") + (
            " <b style='color:#a00'>rejected</b>" if r.rejected else "")
        rows.append(
            f"<tr><td>{r.step}</td><td>k={r.k}</td><td>{r.logppl:.4f}</td>" if scored else
            f"<tr><td>{r.step}</td><td>k={r.k}</td><td>—</td>")
        # The bar's and the text's widths come from TABLE_CSS (.moat-plans-bar, .moat-plans-text): a phone narrows
        # the bar there, which an inline width would override.
        rows.append(f"<td class='moat-plans-bar'><div style='background:#69c;height:10px;width:{width:.0f}%'></div>"
                    f"</td><td>{badge}</td><td>{'' if r.well_formed else '⚠ malformed'}</td>"
                    f"<td class='moat-plans-text'>{html.escape(r.text)}</td></tr>")
    head = "<tr><th>step</th><th>plan</th><th>log-PPL</th><th>bar</th><th>pair</th><th>form</th><th>text</th></tr>"
    # On a 390 px phone the table (~450 px) overflowed a ~300 px box that clipped it: the text column was off screen
    # and could not be reached. The box scrolls sideways instead (studio.app.TABLE_CSS's .moat-scroll).
    return f"{lead}<div class='moat-scroll'><table class='moat-plans'>{head}{''.join(rows)}</table></div>"


def grounder_rollouts(store: Store, run_id: str | None, iteration: int | None, task_id: str | None) -> str:
    """The grounder's GRPO groups for the task's grounded plans in ``iteration``; empty when it learnt by SFT."""
    if not (run_id and iteration is not None and task_id):
        return ""
    return grounder_groups(task_group(store, run_id, int(iteration), task_id, role="grounder"))


def diff_choices(plans: pd.DataFrame) -> list[tuple[str, str]]:
    """The diff pickers' choices for a task's plans (``Store.task_plans``, in its order: step, then log-PPL, best
    first): each plan as ``"step:k"``, labelled as the Pairs tab's pickers label it (``plan_label``: k, log-PPL,
    "same text as k=.."); the step leads the label when the task has several (an iterative run samples K candidates
    per step, each step numbering its own from k=0)."""
    several = plans["step"].nunique() > 1
    out = []
    for step, group in plans.groupby("step", sort=False):
        out += [((f"step {int(step)} · " if several else "") + label, f"{int(step)}:{k}")
                for label, k in plan_labels(group)]
    return out


def _plan_ref(value: Any) -> tuple[int | None, int]:
    """``"step:k"`` as the pickers send it, or a bare k (API callers; the task's first step with that k)."""
    step, _, k = str(value).rpartition(":")
    return (int(step) if step else None), int(k)


def plan_diff(store: Store, run_id: str | None, iteration: int | None, task_id: str | None, plan_a: Any,
              plan_b: Any) -> str:
    """The word diff from plan A to plan B of a task (each ``"step:k"`` or a bare k)."""
    if not (run_id and task_id) or plan_a is None or plan_b is None or iteration is None:
        return ""
    plans = store.task_plans(run_id, int(iteration), task_id)
    texts: dict[tuple[int, int], str] = {(int(r.step), int(r.k)): r.text for r in plans.itertuples(index=False)}
    picked = []
    for value in (plan_a, plan_b):
        try:
            step, k = _plan_ref(value)
        except ValueError:
            return "<p>Both plans must exist.</p>"
        found = [key for key in sorted(texts) if key[1] == k and step in (None, key[0])]
        if not found:
            return "<p>Both plans must exist.</p>"
        picked.append(texts[found[0]])
    return word_diff_html(*picked)


def _with_total(df: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    return df, int(df["total"].iloc[0]) if len(df) else 0


def no_tasks_reason(run_id: str | None, text: str = "", domain: str = "", split: str = "") -> str:
    """Why the task list is empty, for ``queue_info``'s ``empty=`` ("0 rows · <reason>", as the Pairs and Critic
    queues say it; "page 1 of 1" said nothing): no run picked, or the filters that matched no task, named (the search
    text quoted, the search and the facets shown as typed: ``studio.render.md_escaped``)."""
    if not run_id:
        return "pick a run above"
    shown = md_escaped(text)
    filters = ([f"the search “{shown}”"] if shown else []) + ([f"domain {md_escaped(domain)}"] if domain else []) + (
        [f"split {md_escaped(split)}"] if split else [])
    if not filters:
        return "this run has no tasks"
    return f"no task matches {', '.join(filters)}: clear the search or set a filter to all to see more"


def filter_choices(store: Store, run_id: str | None, current: dict[str, str]) -> dict[str, dict]:
    """The domain and split filters' updates for ``run_id``: "all" plus what the run's tasks hold (a run with a dev
    split offers dev; no domain the run lacks is offered). A filter whose value the run lacks goes back to all."""
    facets = store.task_facets(run_id) if run_id else {"domain": [], "split": []}
    out = {}
    for name, values in facets.items():
        value = current.get(name) or ""
        out[name] = gr.update(choices=[("all", "")] + [(v, v) for v in values],
                              value=value if value in values else "")
    return out


def build(ctx: Ctx) -> None:
    with gr.Row():
        search = gr.Textbox(label="Search question / task id", scale=3, elem_id="plans-search")
        # Choices follow the picked run (filter_choices): a fixed list offered splits and domains runs lack.
        domain = Picker([("all", "")], value="", label="Domain", scale=1, elem_id="plans-domain")
        split = Picker([("all", "")], value="", label="Split", scale=1, elem_id="plans-split")
        page = gr.Number(1, label="Page", precision=0, minimum=1, scale=1)
    info = gr.Markdown()
    table = gr.Dataframe(interactive=False, elem_id="plans-tasks", max_height=300, column_widths=WIDTHS)
    task = Picker([], label="Task", elem_id="plans-task")
    plans = gr.HTML(elem_id="plans-view")
    with gr.Row():
        k_a = Picker([], label="Diff: plan A", elem_id="plans-diff-a")
        k_b = Picker([], label="Diff: plan B", elem_id="plans-diff-b")
    diff = gr.HTML(elem_id="plans-diff")
    # The list and the shown task reload by themselves once a stage they read ends for the view (studio.live_views).
    live = watch(ctx, "plans")
    drawn = gr.State(None)  # [run, iteration, task, live trigger] the task's plans were last drawn for

    def load(run_id, it, text, dom, spl, pg, was=None, request: gr.Request | None = None, evt: gr.EventData = None):
        # A live reload (a stage the list reads ended) searches what the session's last load applied, not text typed
        # in the box and not submitted (it applies on Enter), and moves no pick (studio.live_views).
        fired = live.fired(evt, request, run_id, it)
        if fired:
            text = live.applied(request) or ""
        # A page past the last (a typed 99, or a search that narrowed the list) shows the last page, as the queues
        # do: an empty one read "0 rows". The stamp recorded before the read: a stage that ends during it is seen by
        # the next check.
        asked = max(int(pg or 1), 1)
        with live.reading(request, run_id, it, text):
            df, total, shown = clamped_page(
                lambda p: _with_total(task_page(ctx.store, run_id, it, text, dom, spl, p)), asked, PAGE)
        ids = list(df["task_id"])
        info = queue_info(total, asked, shown, PAGE, empty=no_tasks_reason(run_id, text, dom, spl))
        sampled = int(df["with_plans"].iloc[0]) if len(df) else 0
        if sampled and it is not None:  # a run holds every task; an iteration samples a few of them
            info += f" · {sampled} with plans in iteration {int(it)}, listed first"
        partial = partial_sampling(ctx.store, run_id, it)
        if partial:  # plans for a part of the iteration's tasks: not to be read as the whole iteration
            info += f" · ⚠ {partial}"
        # The task shown stays while it is on the page (a search that still lists it), and always on a live reload
        # (among the choices even when the sampled tasks, listed first, pushed it off the page); else the first.
        current = was[2] if isinstance(was, list) and len(was) == 4 else None
        if fired and current:
            return info, df.drop(columns=["total", "with_plans"]), gr.update(
                choices=ids if current in ids else [*ids, current])
        return (info, df.drop(columns=["total", "with_plans"]),
                gr.update(choices=ids) if current in ids else gr.update(choices=ids, value=ids[0] if ids else None))

    def show(run_id, it, task_id, keep_a=None, keep_b=None):
        """The task's plans, the diff pickers and their diff; ``keep_a``/``keep_b``: the diff's picks, kept when the
        task's plans still have both (a live reload of the same task), else its lowest- and highest-PPL plans."""
        choices: list[tuple[str, str]] = []
        first = last = None
        if run_id and task_id and it is not None:
            plans = ctx.store.task_plans(run_id, int(it), task_id)
            choices = diff_choices(plans)
            if choices:  # the first step's lowest- against its highest-PPL plan: the shape of a DPO pair
                step = int(plans["step"].iloc[0])
                scored = plans[(plans["step"] == step) & plans["logppl"].notna()]
                ks = scored["k"] if len(scored) else plans[plans["step"] == step]["k"]  # unscored ones sort last
                first, last = f"{step}:{int(ks.iloc[0])}", f"{step}:{int(ks.iloc[-1])}"
                if {keep_a, keep_b} <= {value for _, value in choices}:
                    first, last = keep_a, keep_b
        # The diff of the two plans picked here comes in the same event: drawn on the pickers' change, it was two
        # more events per task (one per picker), so the diff listens to the curator's picks (.input) only.
        return (plans_html(ctx.store, run_id, it, task_id) + grounder_rollouts(ctx.store, run_id, it, task_id),
                gr.update(choices=choices, value=first), gr.update(choices=choices, value=last),
                plan_diff(ctx.store, run_id, it, task_id, first, last))

    def facets(run_id, dom, spl):
        updates = filter_choices(ctx.store, run_id, {"domain": dom, "split": spl})
        return updates["domain"], updates["split"]

    ctx.run.change(facets, [ctx.run, domain, split], [domain, split], api_name="plans_filters",
                   api_visibility="undocumented")
    inputs = [ctx.run, ctx.iteration, search, domain, split, page]
    # One event, in order per session (see studio.app.CONCURRENCY): a page for a stale iteration never lands last.
    # The view key's change as this event's own trigger (studio.relay: a shared one re-ran every tab's load).
    on_view = own_change(ctx.view, "plans_search_on_view")
    search_evt = gr.on([search.submit, domain.change, split.change, page.change, on_view,
                        live.trigger.change], load, [*inputs, drawn], [info, table, task], api_name="plans_search",
                       trigger_mode="always_last")
    table.select(first_cell, None, task, api_name="plans_select_row", api_visibility="undocumented")
    task.change(lambda r, i, t, bumped: (*show(r, i, t), [r, i, t, bumped]),
                [ctx.run, ctx.iteration, task, live.trigger], [plans, k_a, k_b, diff, drawn], api_name="plans_task")

    def redraw(run_id, it, task_id, was, bumped, a, b):
        """After the list loads: a task kept (or the same id in another iteration) changes no picker value, so no
        task change drew it; drawn here when what is shown is not what is picked as of the live trigger. Only the
        stamp moved (same run, iteration and task): the diff's picks stay."""
        now = [run_id, it, task_id, bumped]
        # Another task (or none drawn yet): the picker's change draws it; drawing here too was a second draw per load.
        if not task_id or was == now or not isinstance(was, list) or was[2] != task_id:
            return (gr.skip(),) * 5
        same = isinstance(was, list) and was[:3] == now[:3]
        return (*show(run_id, it, task_id, a if same else None, b if same else None), now)

    search_evt.then(redraw, [ctx.run, ctx.iteration, task, drawn, live.trigger, k_a, k_b],
                    [plans, k_a, k_b, diff, drawn], api_name="plans_task_redraw", api_visibility="undocumented",
                    show_progress="hidden")
    gr.on([k_a.input, k_b.input], lambda r, i, t, a, b: plan_diff(ctx.store, r, i, t, a, b),
          [ctx.run, ctx.iteration, task, k_a, k_b], diff, api_name="plans_diff", trigger_mode="always_last")
