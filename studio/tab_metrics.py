"""Metrics tab: plotly charts across iterations from the store's ``metrics``, ``train_logs``, ``pairs``/overrides and
``verdicts`` tables, for one run or two runs overlaid (run A solid, run B dashed), e.g. an ablation.

Handler: ``figures(store, run_a, run_b) -> dict[name, go.Figure]`` (names in ``FIGURES``).
"""

from __future__ import annotations

import json

import gradio as gr
import pandas as pd
import plotly.graph_objects as go

from engine.store import Store
from studio.common import Ctx

FIGURES = ("accuracy", "gap_logppl", "dpo_rewards", "dpo_loss", "sft_loss", "pairs", "critic")
DPO_KEYS = ("rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies")


def _fig(title: str, x: str, y: str) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(title=title, xaxis_title=x, yaxis_title=y, height=320, margin=dict(l=40, r=10, t=40, b=40))
    return fig


def _line(fig: go.Figure, x, y, name: str, dashed: bool) -> None:
    fig.add_scatter(x=list(x), y=list(y), mode="lines+markers", name=name,
                    line=dict(dash="dash" if dashed else "solid"))


def _train_logs(store: Store, run_id: str, stage: str) -> pd.DataFrame:
    df = store.query("SELECT iteration, step, loss, logs_json FROM train_logs WHERE run_id = ? AND stage = ? "
                     "ORDER BY iteration, seq", [run_id, stage])
    df["x"] = range(1, len(df) + 1)  # logged steps across iterations, in order
    return df


def _pair_counts(store: Store, run_id: str) -> pd.DataFrame:
    rows = []
    for it in store.iterations(run_id):
        eff = store.effective_pairs(run_id, it)
        if len(eff):
            rows.append({"iteration": it, "pairs": int((~eff["excluded"] & ~eff["tie"]).sum()),
                         "tie_rate": float(eff["tie"].mean()), "excluded": int(eff["excluded"].sum())})
    return pd.DataFrame(rows, columns=["iteration", "pairs", "tie_rate", "excluded"])


def figures(store: Store, run_a: str | None, run_b: str | None = None) -> dict[str, go.Figure]:
    """Every metrics chart for run A (and run B overlaid when given and different)."""
    figs = {
        "accuracy": _fig("Accuracy per split/domain", "iteration", "accuracy"),
        "gap_logppl": _fig("Capability gap: gold-action log-PPL", "iteration", "log-PPL"),
        "dpo_rewards": _fig("DPO rewards / margins / accuracies", "logged step", "value"),
        "dpo_loss": _fig("DPO loss", "logged step", "loss"),
        "sft_loss": _fig("Grounder SFT loss", "logged step", "loss"),
        "pairs": _fig("Pairs in training and tie rate", "iteration", "count / rate"),
        "critic": _fig("Critic status rates", "iteration", "share of verdicts"),
    }
    runs = [r for r in dict.fromkeys([run_a, run_b]) if r]
    for n, run_id in enumerate(runs):
        dashed, tag = n == 1, ("B " if n == 1 else "A ") if len(runs) > 1 else ""
        m = store.frame("metrics", run_id)
        for name, key in (("accuracy", "accuracy"), ("gap_logppl", "gap_logppl")):
            part = m[m["name"] == key]
            for (split, domain), df in part.groupby(["split", "domain"]):
                _line(figs[name], df["iteration"], df["value"], f"{tag}{split}/{domain}", dashed)
        dpo = _train_logs(store, run_id, "train_planner")
        logs = [json.loads(t) for t in dpo["logs_json"]]
        for key in DPO_KEYS:
            points = [(x, lg[key]) for x, lg in zip(dpo["x"], logs) if isinstance(lg.get(key), (int, float))]
            if points:
                _line(figs["dpo_rewards"], *zip(*points), f"{tag}{key}", dashed)
        for fig, df in ((figs["dpo_loss"], dpo), (figs["sft_loss"], _train_logs(store, run_id, "train_grounder"))):
            df = df[df["loss"].notna()]
            _line(fig, df["x"], df["loss"], f"{tag}loss", dashed)
        pc = _pair_counts(store, run_id)
        _line(figs["pairs"], pc["iteration"], pc["pairs"], f"{tag}pairs", dashed)
        _line(figs["pairs"], pc["iteration"], pc["tie_rate"], f"{tag}tie rate", dashed)
        v = store.query("SELECT iteration, status, count(*) AS n FROM verdicts WHERE run_id = ? "
                        "GROUP BY iteration, status ORDER BY iteration", [run_id])
        if len(v):
            v["rate"] = v["n"] / v.groupby("iteration")["n"].transform("sum")
            for status, df in v.groupby("status"):
                _line(figs["critic"], df["iteration"], df["rate"], f"{tag}{status}", dashed)
    return figs


def build(ctx: Ctx) -> None:
    with gr.Row():
        compare = gr.Dropdown([], label="Compare with run (B, dashed)", elem_id="metrics-compare")
        refresh = gr.Button("Refresh", elem_id="metrics-refresh")
    plots = {}
    for i in range(0, len(FIGURES), 2):
        with gr.Row():
            for name in FIGURES[i:i + 2]:
                plots[name] = gr.Plot(elem_id=f"metrics-{name}")

    def draw(run_a, run_b):
        figs = figures(ctx.store, run_a, run_b)
        return [figs[n] for n in FIGURES]

    def runs(run_a):
        others = [r["run_id"] for r in ctx.store.list_runs() if r["run_id"] != run_a]
        return gr.update(choices=["", *others], value="")

    ctx.run.change(runs, ctx.run, compare, api_name="metrics_runs", api_visibility="undocumented")
    # One event, in order per session (see studio.app.CONCURRENCY): older figures never land last.
    gr.on([ctx.run.change, compare.change, refresh.click], draw, [ctx.run, compare], [plots[n] for n in FIGURES],
          api_name="metrics_figures", trigger_mode="always_last")
