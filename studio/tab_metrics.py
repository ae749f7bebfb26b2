"""Metrics tab: the run view (plotly charts across iterations from the store's ``metrics``, ``train_logs``,
``pairs``/overrides and ``verdicts`` tables, for one run or two runs overlaid: run A solid, run B dashed, e.g. an
ablation; the run's stored swap table and iteration-to-iteration McNemar tests) or, when an experiment is picked, the
experiment view (``studio.metrics_experiment``: figures, table, the change vs iteration 0, swap tables, the
per-template view of a chosen split).

Handler: ``figures(store, run_a, run_b) -> dict[name, go.Figure]`` (names in ``FIGURES``). Iteration axes have integer
ticks; accuracy lines carry their 95% Wilson interval as error bars (``accuracy_lo``/``accuracy_hi``, when stored);
each split/domain has one colour in the accuracy, gap-PPL and gap-log-PPL figures. The tables come from
``studio.metrics_swaps``. The compare box offers only the runs with evaluation rows (listed again, the pick kept, on
Refresh and each time this tab is shown, not when another is: a run evaluated later shows without a page reload); with
a compare run drawn, the tables (run A's alone) are led by "run A: <id>", and a line above the charts cautions when A
and B were evaluated on different task sets (``studio.metrics_compare``). The run picker's change reaches the compare
list, the experiments and the figures each through a copy of its own (``studio.relay``). Every handler only reads,
except *Compute the swap table*: a write endpoint (refused by ``check_writable`` for ``--read-only`` and viewers, and
on Spaces, where the button is hidden) that starts ``studio.jobs.swap_job`` on the shared worker, since
``python -m engine swap`` cannot open the store beside the studio. While a swap job this page started runs, a timer
(every ``SWAP_WATCH_S``, off otherwise) watches the worker; when the job ends it redraws the run's tables and says how
it ended (``swap_ended``), so nobody has to press Refresh. Likewise the run view redraws by itself (as Refresh does)
once a stage its charts read ends in run A or the compare run (``studio.live_views``: checked while the tab is shown,
and when it is shown again).

The training charts follow how the runs train (``studio.stage_text.run_objectives``): the planner's loss is titled
and named DPO or GRPO, the grounder's SFT or GRPO; the rewards chart draws DPO's rewards / margins / accuracies or
GRPO's mean reward and each reward's mean (``studio.metrics_rewards``: DPO's accuracies, a share, on a right-hand
percent axis of their own), and a GRPO run without reward logs says DPO rewards do not apply; the pairs chart
(``studio.metrics_pairs``: the pairs DPO trained on once an iteration trained, never the curation since) says when
the planner does not train on the pairs (GRPO), and draws the tie rate (a fraction) on its own right-hand percent
axis beside the pair count (whole-number ticks); the critic's status shares are in % too, as every rate here is.
An empty chart of a picked run says which stage writes it, or that every run skipped that stage
(``studio.metrics_notes``). The keys of ``FIGURES`` stay as they are (element ids, the API).
"""

from __future__ import annotations

import gradio as gr
import pandas as pd
import plotly.graph_objects as go

from engine.report import UnknownExperiment, experiment_report
from engine.store import Store
from studio import metrics_experiment as mexp
from studio.common import Ctx, check_writable, fired_by, session_of, who_of
from studio.jobs import swap_job, swap_unavailable
from studio.live_views import watch
from studio.metrics_compare import compare_choices, run_a_label, task_set_caution
from studio.metrics_notes import empty_notes
from studio.metrics_pairs import draw_pairs, pair_counts
from studio.metrics_rewards import draw_rewards
from studio.metrics_swaps import changes_markdown, swap_markdown
from studio.picker import Picker
from studio.plots import (
    LOWER_IS_BETTER,
    colours,
    count_axis,
    figure,
    fit_legend,
    iteration_gaps,
    line,
    note_if_empty,
    second_axis,
)
from studio.relay import own_change
from studio.stage_text import objectives, run_objectives

SWAP_WATCH_S = 3  # the busy pace of studio.pace: only while this page's swap job runs
# The browser-side (tab shown) -> the hidden "shown" box's update: a new value when it is this tab (studio.app.TABS'
# id), else an update without one (nothing changes, no server call).
SHOWN_JS = "(tab) => (tab === 'metrics' ? String(Date.now()) : {__type__: 'update'})"


def swap_ended(snapshot: dict) -> str | None:
    """None while the worker's job is a running swap; else the line that says how the swap job ended (a job of
    another kind in the snapshot means the swap ended before it started, as it would have to)."""
    if snapshot.get("label") == "swap" and snapshot.get("running"):
        return None
    if snapshot.get("label") != "swap" or snapshot.get("status") == "finished":
        return "The swap job has finished: the table below is the new one."
    if snapshot.get("status") == "stopped":
        return "The swap job was stopped: nothing was kept, the table below is the one stored before."
    error = str(snapshot.get("error") or "").strip().splitlines()
    return f"The swap job failed: {error[0] if error else 'see the Run tab'}"


FIGURES = ("accuracy", "gap_ppl", "gap_logppl", "dpo_rewards", "dpo_loss", "sft_loss", "pairs", "critic")
NO_EXPERIMENT = ("(none: the picked run)", "")


def _train_logs(store: Store, run_id: str, stage: str) -> pd.DataFrame:
    df = store.train_log_rows(run_id, stage)
    df["x"] = range(1, len(df) + 1)  # logged steps across iterations, in order
    return df


ITERATION_MARK = "iteration start"  # the name of mark_iterations' labels, told apart from a chart's note


def mark_iterations(fig: go.Figure, logs: pd.DataFrame) -> None:
    """A dotted line and "it N" where each iteration's training log starts on a logged-step axis: the steps of every
    iteration run on from the last, and nothing else told where iteration 2 began."""
    if not len(logs):
        return
    starts = logs.groupby("iteration")["x"].min().sort_index()
    for it, x in starts.items():
        fig.add_vline(x=float(x) - 0.5, line_dash="dot", line_color="#999", line_width=1,
                      annotation_position="top right",
                      annotation=dict(text=f"it {int(it)}", name=ITERATION_MARK, font=dict(size=10, color="#666")))


def _metric_lines(store: Store, run_id: str) -> pd.DataFrame:
    """The run's metrics wide: one row per (split, domain, iteration), one column per metric name."""
    m = store.frame("metrics", run_id)
    if not len(m):
        return pd.DataFrame(columns=["split", "domain", "iteration"])
    wide = m.pivot_table(index=["split", "domain", "iteration"], columns="name", values="value", aggfunc="last")
    return wide.reset_index().sort_values(["split", "domain", "iteration"])


def _union(lists) -> list[str]:
    return list(dict.fromkeys(name for names in lists for name in names))


def training_titles(planner: list[str], grounder: list[str]) -> dict[str, str]:
    """The training charts' titles for the objectives shown (``["DPO"]``, ``["GRPO"]``, both when runs differ)."""
    planner, grounder = planner or ["DPO"], grounder or ["SFT"]
    p, g = " / ".join(planner), " / ".join(grounder)
    rewards = {"DPO": "DPO rewards / margins / accuracies", "GRPO": "GRPO rewards (mean per logged step)"}
    # What qualifies the pairs after " · ": a line of its own on a narrow chart (studio.plots.titled)
    if "DPO" not in planner:
        pairs = f"Preference pairs and tie rate · not trained on: the planner learns by {p}"
    elif len(planner) > 1:
        pairs = f"Pairs and tie rate · DPO trains on them, {' / '.join(n for n in planner if n != 'DPO')} does not"
    else:
        pairs = "Pairs in training and tie rate"
    shown = rewards.get(planner[0], f"{p} rewards") if len(planner) == 1 else f"Planner rewards ({p})"
    return {"dpo_rewards": shown,
            "dpo_loss": f"Planner {p} loss", "sft_loss": f"Grounder {g} loss", "pairs": pairs}


def figures(store: Store, run_a: str | None, run_b: str | None = None) -> dict[str, go.Figure]:
    """Every metrics chart for run A (and run B overlaid when given and different)."""
    runs = [r for r in dict.fromkeys([run_a, run_b]) if r]
    trained_by = {run_id: run_objectives(store, run_id) for run_id in runs}
    planner = _union(t["planner"] for t in trained_by.values()) or ["DPO"]
    grounder = _union(t["grounder"] for t in trained_by.values()) or ["SFT"]
    titles = training_titles(planner, grounder)
    figs = {
        "accuracy": figure("Accuracy per split/domain", "iteration", "accuracy", percent=True,
                           subtitle="bars: 95% Wilson interval"),
        "gap_ppl": figure("Capability gap: mean gold-action PPL" + LOWER_IS_BETTER, "iteration", "PPL"),
        "gap_logppl": figure("Capability gap: gold-action log-PPL" + LOWER_IS_BETTER, "iteration", "log-PPL"),
        "dpo_rewards": figure(titles["dpo_rewards"], "logged step", "value", iterations=False),
        "dpo_loss": figure(titles["dpo_loss"], "logged step", "loss", iterations=False),
        "sft_loss": figure(titles["sft_loss"], "logged step", "loss", iterations=False),
        "pairs": second_axis(figure(titles["pairs"], "iteration", "pairs"), "tie rate", percent=True),
        "critic": figure("Critic status rates", "iteration", "share of verdicts", percent=True),
    }
    wide = {run_id: _metric_lines(store, run_id) for run_id in runs}
    most_pairs = 0  # the pair count axis' top, over the runs
    palette = colours(sorted({(s, d) for df in wide.values() for s, d in zip(df["split"], df["domain"])}))
    for n, run_id in enumerate(runs):
        dashed, tag = n == 1, ("B " if n == 1 else "A ") if len(runs) > 1 else ""
        for (split, domain), df in wide[run_id].groupby(["split", "domain"]):
            colour, name = palette[(split, domain)], f"{tag}{split}/{domain}"
            for key in ("accuracy", "gap_ppl", "gap_logppl"):
                part = df[df[key].notna()] if key in df else df.iloc[:0]
                if not len(part):
                    continue
                bounds = ["accuracy_lo", "accuracy_hi"]
                bars = key == "accuracy" and set(bounds) <= set(part) and bool(part[bounds].notna().all(axis=None))
                line(figs[key], part["iteration"], part[key], name, colour, dashed,
                     lo=part["accuracy_lo"] if bars else None, hi=part["accuracy_hi"] if bars else None)
        planner_logs = _train_logs(store, run_id, "train_planner")
        draw_rewards(figs["dpo_rewards"], planner_logs, tag, dashed)  # DPO's accuracies on a % axis of their own
        grounder_logs = _train_logs(store, run_id, "train_grounder")
        if n == 0:  # run A's iterations marked on its step axis (run B's steps need not line up with them)
            for fig, df in ((figs["dpo_rewards"], planner_logs), (figs["dpo_loss"], planner_logs),
                            (figs["sft_loss"], grounder_logs)):
                mark_iterations(fig, df)
        for role, fig, df in (("planner", figs["dpo_loss"], planner_logs),
                              ("grounder", figs["sft_loss"], grounder_logs)):
            df = df[df["loss"].notna()]
            # one line per objective (a curriculum may switch): its name on the line, never a GRPO loss as DPO's
            by = df["iteration"].map({it: objectives(store, run_id, int(it))[role] for it in set(df["iteration"])})
            for name in dict.fromkeys(by):
                part = df[by == name]
                # Broken between iterations as the rewards are: each iteration's training starts afresh.
                x, y = zip(*iteration_gaps(list(zip(part["x"], part["loss"], part["iteration"]))))
                line(fig, x, y, f"{tag}{name} loss", dashed=dashed)
        # What DPO trained on in each trained iteration, never the pairs as curated since (studio.metrics_pairs)
        most_pairs = max(most_pairs, draw_pairs(figs["pairs"], pair_counts(store, run_id), tag, dashed,
                                                dpo="DPO" in trained_by[run_id]["planner"]))
        v = store.verdict_status_counts(run_id)
        if len(v):
            v["rate"] = v["n"] / v.groupby("iteration")["n"].transform("sum")
            for status, df in v.groupby("status"):
                line(figs["critic"], df["iteration"], df["rate"], f"{tag}{status}", dashed=dashed)
    figs["pairs"].update_layout(yaxis=count_axis(most_pairs))  # whole pairs, never 91.5 (the tie rate's y2 as it is)
    if not runs:
        return {name: note_if_empty(fig, "Nothing measured yet: pick a run, or start one in the Run tab")
                for name, fig in figs.items()}
    notes = empty_notes(store, runs, planner, grounder)  # a picked run's empty charts: what writes them
    return {name: note_if_empty(fit_legend(fig), notes[name]) for name, fig in figs.items()}


def run_tables(store: Store, run_id: str | None, spaces: bool = False,
               compare: str | None = None) -> tuple[str, str]:
    """(iteration-to-iteration McNemar markdown, swap table markdown) of the picked run, each led by "run A: <id>"
    when a compare run is drawn beside it (``studio.metrics_compare.run_a_label``: the tables are A's alone)."""
    if not run_id:
        return "", ""
    return (run_a_label(changes_markdown(store, run_id), run_id, compare),
            run_a_label(swap_markdown(store, run_id, spaces), run_id, compare))


def build(ctx: Ctx) -> None:
    with gr.Row():
        experiment = Picker([NO_EXPERIMENT], value="", label="Experiment (empty: the picked run)",
                                 elem_id="metrics-experiment", scale=2)
        # "" from the start, as runs() sets it: from None, that first set was a change that drew the figures twice.
        compare = Picker([""], value="", label="Compare with run (B, dashed)", elem_id="metrics-compare", scale=2)
        refresh = gr.Button("Refresh", elem_id="metrics-refresh", scale=1)
    # A new value each time this tab is shown, set in the browser (SHOWN_JS): the compare list is listed again then,
    # and a switch to another tab asks the server nothing.
    shown = gr.Textbox("", visible="hidden", elem_id="metrics-shown")
    plots, exp_plots = {}, {}
    with gr.Column(elem_id="metrics-run-view") as run_view:
        caution = gr.Markdown(elem_id="metrics-compare-caution")  # A and B evaluated on different tasks
        for i in range(0, len(FIGURES), 2):
            with gr.Row():
                for name in FIGURES[i:i + 2]:
                    # Two per row on a wide screen; below ~2 x 420 px they wrap, one per row, rather than squeeze
                    # to a sliver with clipped titles.
                    # No label: "Plot" said nothing, and a shown label makes Gradio pad the top by 100 px.
                    plots[name] = gr.Plot(elem_id=f"metrics-{name}", min_width=420, show_label=False)
        changes = gr.Markdown(elem_id="metrics-changes")
        swaps = gr.Markdown(elem_id="metrics-swaps")
        with gr.Row(visible=not ctx.spaces):  # a Space does not evaluate swapped agents (studio.metrics_swaps)
            swap_go = gr.Button("Compute the swap table (a job)", elem_id="metrics-swap-compute", scale=1,
                                interactive=not ctx.read_only)
            ctx.write_controls.append(swap_go)  # off for a viewer (studio.app)
            swap_message = gr.Markdown(elem_id="metrics-swap-message")
        swap_watch = gr.Timer(SWAP_WATCH_S, active=False)
    with gr.Column(visible=False, elem_id="metrics-experiment-view") as exp_view:
        for i in range(0, len(mexp.FIGURES), 2):
            with gr.Row():
                for name in mexp.FIGURES[i:i + 2]:
                    exp_plots[name] = gr.Plot(elem_id=f"metrics-exp-{name}", min_width=420, show_label=False)
        exp_table = gr.Markdown(elem_id="metrics-experiment-table")
        exp_changes = gr.Markdown(elem_id="metrics-experiment-changes")  # the gap's % change: the paper's number
        # The swap tables before the per-template tables: those run to a table per variant of a row per template
        # (thousands of pixels on the demo), and the swap tables under them were out of a reader's reach.
        exp_swaps = gr.Markdown(elem_id="metrics-experiment-swaps")
        with gr.Row():
            split = Picker([], label="By template: split", elem_id="metrics-breakdown-split", scale=1)
        exp_breakdown = gr.Markdown(elem_id="metrics-experiment-breakdown")

    # The run view redraws by itself once a stage its charts read ends in run A or the compare run (studio.live_views),
    # as Refresh would.
    live = watch(ctx, "metrics")

    def draw(run_a, run_b, request: gr.Request | None = None):
        # Before the read: a stage that ends during it is seen by the next check.
        live.seen(request, run_a, None, applied=run_b or None)
        figs = figures(ctx.store, run_a, run_b)
        return ([figs[n] for n in FIGURES] + list(run_tables(ctx.store, run_a, ctx.spaces, run_b))
                + [task_set_caution(ctx.store, run_a, run_b)])

    def runs(run_a, evt: gr.EventData = None, request: gr.Request | None = None):
        choices = ["", *compare_choices(ctx.store, run_a)]  # beside run A: runs with evaluation rows (others: nothing)
        # Refresh or this tab shown again (a run evaluated meanwhile): the list again and no value, so the box keeps
        # its pick, one made while this ran included, and nothing is redrawn again. A new run A empties the box.
        # Not on the box's focus nor on a live redraw, which can come while the box is open: Gradio's page answered
        # any update of a focused box with a change to "" (A redrawn without B while the box still showed B).
        kept = fired_by(evt, refresh) or fired_by(evt, shown)
        drawn = live.applied(request)  # the B this session last drew with
        if kept and not (isinstance(drawn, str) and drawn and drawn not in choices):
            return gr.update(choices=choices)
        # A new run A, or a B no longer offered (it became run A while a run change waited behind this event)
        return gr.update(choices=choices, value="")

    def experiments(current):
        choices = [NO_EXPERIMENT, *mexp.experiment_choices(ctx.store)]
        return gr.update(choices=choices, value=current if current in {v for _, v in choices} else "")

    def show_experiment(experiment_id):
        hidden = [gr.update(value=None, visible=True) for _ in mexp.FIGURES]
        if not experiment_id:
            return [gr.update(visible=True), gr.update(visible=False), *hidden, "", "",
                    gr.update(choices=[], value=None), "", ""]
        try:
            report = experiment_report(ctx.store, experiment_id)
        except UnknownExperiment as exc:
            raise gr.Error(f"No experiment {experiment_id} in this store; press Refresh.") from exc
        figs = mexp.experiment_figures(report)
        splits = mexp.breakdown_choices(ctx.store, experiment_id)
        first = splits[0][1] if splits else None
        return [gr.update(visible=False), gr.update(visible=True),
                *(gr.update(value=figs.get(n), visible=n in figs) for n in mexp.FIGURES),
                mexp.experiment_table(report), mexp.experiment_changes(report), gr.update(choices=splits, value=first),
                mexp.experiment_breakdown(ctx.store, experiment_id, first), mexp.experiment_swaps(ctx.store, report)]

    def show_breakdown(experiment_id, split_name):
        return mexp.experiment_breakdown(ctx.store, experiment_id, split_name) if experiment_id else ""

    def on_swap(run_id, name, request: gr.Request):
        check_writable(ctx, request)
        if ctx.spaces:
            return "Refused on Spaces: the swap table evaluates every pairing of the run's agents.", gr.skip()
        refused = swap_unavailable(ctx.store, run_id) or ctx.jobs.submit("swap", run_id, swap_job(ctx.store, run_id),
                                                                          user=who_of(name, request) or "",
                                                                          session=session_of(request))
        if refused:
            return refused, gr.skip()
        return (f"Started `swap` on `{run_id}`: the Run tab follows the job; the table below is redrawn when it "
                "ends."), gr.Timer(active=True)

    def watch_swap(run_id, request: gr.Request | None = None):
        ended = swap_ended(ctx.jobs.snapshot())
        if ended is None:
            return gr.skip(), gr.skip(), gr.skip(), gr.skip()
        # The compare run this session's charts were last drawn with (its tables stay labelled as run A's).
        compare = live.applied(request)
        return (*run_tables(ctx.store, run_id, ctx.spaces, compare if isinstance(compare, str) else None), ended,
                gr.Timer(active=False))

    swap_go.click(on_swap, [ctx.run, ctx.curator], [swap_message, swap_watch], api_name="metrics_swap_compute")
    swap_watch.tick(watch_swap, ctx.run, [changes, swaps, swap_message, swap_watch], show_progress="hidden",
                    api_name="metrics_swap_watch", api_visibility="undocumented", trigger_mode="always_last")
    # Each on the run picker's change through a copy of its own (studio.relay): one of them still running for a page
    # load when the tab shown, Refresh, the compare box or the live trigger asked for it again made the page fire the
    # picker's change again, and every tab listening to it computed twice.
    ctx.tab.change(None, ctx.tab, shown, js=SHOWN_JS, show_progress="hidden", api_name="metrics_shown",
                   api_visibility="undocumented")
    gr.on([own_change(ctx.run, "metrics_runs_on_run"), refresh.click, shown.change], runs, ctx.run, compare,
          api_name="metrics_runs", api_visibility="undocumented", show_progress="hidden", trigger_mode="always_last")
    gr.on([own_change(ctx.run, "metrics_experiments_on_run"), refresh.click], experiments, experiment, experiment,
          api_name="metrics_experiments", api_visibility="undocumented", trigger_mode="always_last")
    # One event, in order per session (see studio.app.CONCURRENCY): older figures never land last.
    gr.on([own_change(ctx.run, "metrics_figures_on_run"), compare.change, refresh.click, live.trigger.change], draw,
          [ctx.run, compare],
          [*(plots[n] for n in FIGURES), changes, swaps, caution], api_name="metrics_figures",
          trigger_mode="always_last")
    gr.on([experiment.change, refresh.click], show_experiment, experiment,
          [run_view, exp_view, *(exp_plots[n] for n in mexp.FIGURES), exp_table, exp_changes, split, exp_breakdown,
           exp_swaps],
          api_name="metrics_experiment", trigger_mode="always_last")
    # .input, not .change: show_experiment sets the split too, and that must not draw the table a second time
    split.input(show_breakdown, [experiment, split], exp_breakdown, api_name="metrics_breakdown",
                api_visibility="undocumented", trigger_mode="always_last")
