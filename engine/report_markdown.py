"""An experiment report (``engine.report.experiment_report``) rendered as markdown tables, and the text formats
the studio and the other reports share.

Contract: pure functions of the report dict; nothing here reads a store or recomputes a statistic.
``report_markdown(report)`` gives one table per evaluated split (accuracy, the gap as mean PPL and as mean log-PPL,
accuracy per domain), the change against iteration 0 and against the baseline (paired over seeds; a variant
evaluated on other tasks is named, not paired), each swap table, and the runs with their wall times.
``format_interval`` prints a summary as ``mean [lo, hi]`` (``mean (n=1)`` for one seed, whose zero-width JSON
interval is no interval);
``format_test`` prints a paired test as ``diff [lo, hi] p=.. (n=..)`` (``(n=1, no test)`` for one pair);
``markdown_table`` and ``duration_text`` are the shared table and duration formats.
"""

from __future__ import annotations

from typing import Any

from engine.report import SPLIT_NAMES


def duration_text(seconds: float) -> str:
    """``"4 min 7 s"``, or ``"42 s"`` under a minute."""
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


def format_interval(cell: dict[str, Any] | None, scale: float = 1.0, digits: int = 1) -> str:
    """``mean [lo, hi]``; one seed has no interval (the JSON's ``[mean, mean]`` is not a width): ``mean (n=1)``."""
    if not cell or cell.get("mean") is None:
        return "–"
    if cell.get("n") == 1:
        return f"{cell['mean'] * scale:.{digits}f} (n=1)"
    lo, hi = cell["ci95"]
    return f"{cell['mean'] * scale:.{digits}f} [{lo * scale:.{digits}f}, {hi * scale:.{digits}f}]"


def format_test(cell: dict[str, Any] | None, scale: float = 1.0, digits: int = 1) -> str:
    """``diff [lo, hi] p=.. (n=..)``; one pair of seeds gives a difference, not a test (the JSON's p = 1 is no
    evidence either way), and says so."""
    if not cell or cell.get("diff") is None:
        return "–"
    if cell.get("n") == 1:
        return f"{cell['diff'] * scale:+.{digits}f} (n=1, no test)"
    if cell.get("sd") == 0:  # every seed differed alike: a t test has no spread to go on
        return f"{cell['diff'] * scale:+.{digits}f} (n={cell['n']}, the same on every seed: no test)"
    lo, hi = cell["ci95"]
    return (f"{cell['diff'] * scale:+.{digits}f} [{lo * scale:+.{digits}f}, {hi * scale:+.{digits}f}] "
            f"p={cell['p']:.3g} (n={cell['n']})")


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    if not rows:
        return ["(no data)", ""]
    return ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|",
            *("| " + " | ".join(r) + " |" for r in rows), ""]


def report_markdown(report: dict[str, Any]) -> str:
    """The report as markdown tables: one per split, change vs iteration 0, vs the baseline, runs and wall times."""
    variants = report["variants"]
    done = sum(r["status"] == "done" for r in report["runs"])
    lines = [f"# Experiment {report['name']} (`{report['experiment']}`)", "",
             f"{len(report['runs'])} run(s), {done} done; variants: {', '.join(variants) or '-'}; seeds: "
             f"{', '.join(map(str, report['seeds']))}; iterations requested: {report['iterations_requested']}; "
             f"baseline: {report['baseline'] or '-'}. Means over seeds with 95% t intervals; accuracies in %; "
             f"iteration 0 = the starting agents.", ""]
    for split in ("held_in", "held_out", "dev"):
        domains = sorted({d for v in variants.values() for it in v["iterations"].values()
                          for d in it.get("by_domain", {}).get(split, {})})
        rows = []
        for name, v in variants.items():
            for t, it in v["iterations"].items():
                if f"{split}_accuracy" not in it:
                    continue
                rows.append([name, t, str(it[f"{split}_accuracy"]["n"]), format_interval(it[f"{split}_accuracy"], 100),
                             format_interval(it.get(f"{split}_gap_ppl"), 1, 3),
                             format_interval(it.get(f"{split}_gap_logppl"), 1, 3),
                             *(format_interval(it["by_domain"].get(split, {}).get(d, {}).get("accuracy"), 100)
                               for d in domains)])
        if rows:
            lines += [f"## {split}", ""]
            lines += markdown_table(["variant", "iteration", "seeds", "accuracy %", "gap PPL", "gap log-PPL",
                                     *(f"{d} accuracy %" for d in domains)], rows)
    # Accuracy columns for the splits the runs evaluated (a dev-only tuning experiment has no held-out column).
    evaluated = [s for s in ("held_in", "held_out", "dev")
                 if any(f"{s}_accuracy" in it for v in variants.values() for it in v["iterations"].values())]
    # The gap's change on held-out (the target) and on dev (where a change to the method may be judged).
    gap_splits = [s for s in ("held_out", "dev") if s in evaluated]
    gap_domains = {s: sorted({d for v in variants.values() for it in v["iterations"].values()
                              for d in it.get("vs_iteration_0", {}).get(f"{s}_gap_ppl_pct_by_domain") or {}})
                   for s in gap_splits}
    rows = [[name, t, *(format_test(it["vs_iteration_0"].get(f"{s}_accuracy"), 100) for s in evaluated),
             *(cell for s in gap_splits for cell in (
                 format_test(it["vs_iteration_0"].get(f"{s}_gap_ppl_pct")),
                 *(format_test((it["vs_iteration_0"].get(f"{s}_gap_ppl_pct_by_domain") or {}).get(d))
                   for d in gap_domains[s])))]
            for name, v in variants.items() for t, it in v["iterations"].items() if "vs_iteration_0" in it]
    lines += ["## Change vs iteration 0 (paired over seeds)", ""]
    lines += markdown_table(["variant", "iteration", *(f"{SPLIT_NAMES[s]} accuracy Δ pp" for s in evaluated),
                             *(head for s in gap_splits for head in (
                                 f"{SPLIT_NAMES[s]} gap PPL Δ %",
                                 *(f"{SPLIT_NAMES[s]} {d} gap PPL Δ %" for d in gap_domains[s])))], rows)
    if report["baseline"] and set(variants) - {report["baseline"]}:  # one variant alone has nothing to pair
        rows = [[name, t, *(format_test(it["vs_baseline"].get(f"{s}_accuracy"), 100) for s in evaluated),
                 *(format_test(it["vs_baseline"].get(f"{s}_gap_ppl"), 1, 3) for s in gap_splits)]
                for name, v in variants.items() for t, it in v["iterations"].items() if "vs_baseline" in it]
        lines += [f"## vs {report['baseline']} (paired over seeds, same iteration)", ""]
        lines += markdown_table(["variant", "iteration", *(f"{SPLIT_NAMES[s]} accuracy Δ pp" for s in evaluated),
                                 *(f"{SPLIT_NAMES[s]} gap PPL Δ" for s in gap_splits)], rows)
        # A variant evaluated on other tasks has no paired test: say so rather than leave it out unexplained.
        refused = [f"Not paired: {name} {v['vs_baseline_refused']}." for name, v in variants.items()
                   if v.get("vs_baseline_refused")]
        lines += [*refused, ""] if refused else []
    for variant, sw in report.get("swaps", {}).items():
        a, b = sw["after"], sw["base"]
        labels = {f"P{b}G{b}": "starting agents", f"P{a}G{b}": "stage 1 only (planner trained)",
                  f"P{b}G{a}": "stage 2 only (grounder trained)", f"P{a}G{a}": "both (the trained system)",
                  f"gold/G{b}": "starting grounder on gold plans", f"gold/G{a}": "trained grounder on gold plans"}
        splits = sorted({k for c in sw["cells"].values() for k in c})
        rows = [[f"{cell} ({labels.get(cell, '')})", *(format_interval(sw["cells"][cell].get(k), 100) for k in splits)]
                for cell in labels if cell in sw["cells"]]
        lines += [f"## Swap table: {variant} (planner x grounder, {len(sw['seeds'])} seed(s), accuracy %)", ""]
        lines += markdown_table(["agents", *(k.replace("_accuracy", "") for k in splits)], rows)
        rows = [[stage, *(format_test(sw["gains"][stage].get(k), 100) for k in splits)]
                for stage in ("stage1", "stage2", "both") if sw["gains"].get(stage)]
        lines += markdown_table(["gain vs starting agents (pp, paired over seeds)",
                                 *(k.replace("_accuracy", "") for k in splits)], rows)
    rows = [[r["variant"], str(r["seed"]), f"`{r['run_id']}`", r["status"] + (f" ({r['at']})" if "at" in r else ""),
             str(r["iterations_done"]), f"{r['wall_s']:.1f} s"] for r in report["runs"]]
    rows += [[m["variant"], str(m["seed"]), "-", "missing", "-", "-"] for m in report["missing"]]
    lines += ["## Runs", ""]
    lines += markdown_table(["variant", "seed", "run", "status", "iterations done", "wall"], rows)
    per_variant = ", ".join(f"{v} {s:.1f} s" for v, s in report["wall_s"]["per_variant"].items())
    busy = report["wall_s"].get("busy")
    clock = (f"; clock time with any run under way (runs side by side counted once, idle time between a kill and its "
             f"resume left out, swap tables not included): {busy:.1f} s") if busy is not None else ""
    lines += [f"Total wall time (sum of stage durations): {report['wall_s']['total']:.1f} s ({per_variant}){clock}.",
              ""]
    return "\n".join(lines)
