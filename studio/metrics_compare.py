"""The Metrics tab's run view with a compare run (B) beside run A: which runs may be B, whether A and B were evaluated
on the same tasks, and the label of the tables that are run A's alone. Reads the store, renders text; no Gradio.

* ``compare_choices(store, run_a) -> list[str]``: the runs other than A that have evaluation rows (``metrics``), in
  the store's order. A run without any (a run still in its first stages) has no line to draw beside A: offered, it
  drew nothing and looked like a broken chart.
* ``task_set_caution(store, run_a, run_b) -> str``: one markdown line when A and B were evaluated on different task
  sets on a split both have, else "". Per split (domain "all"), the ``n`` metric of each iteration (the count the
  accuracy is out of) is compared; when both runs have per-task traces (``eval_traces``) of the split, the sets of
  task ids are compared too (an order-free fingerprint computed in the query: no id list comes back). Two small
  grouped queries over the two runs. When run A has no evaluation rows at all, the line says that instead
  (``NO_ROWS_NOTE``): the charts drew B's lines alone and nothing told why A's were missing.
* ``run_a_label(text, run_a, run_b) -> str``: ``text`` (the swap table, the iteration-to-iteration tests: computed
  for run A only) led by "run A: `<id>`" when a different run B is drawn beside it, else as it was.
"""

from __future__ import annotations

from engine.report import SPLIT_NAMES
from engine.store import Store


def compare_choices(store: Store, run_a: str | None) -> list[str]:
    """The runs a compare box offers beside ``run_a``: every other run with evaluation rows."""
    evaluated = set(store.query("SELECT DISTINCT run_id FROM metrics")["run_id"])
    return [r["run_id"] for r in store.list_runs() if r["run_id"] != run_a and r["run_id"] in evaluated]


def _counts(store: Store, runs: list[str]) -> dict[tuple[str, str], tuple[int, ...]]:
    """(run, split) -> the distinct task counts (``n``, domain "all") of its evaluated iterations, ascending."""
    df = store.query("SELECT run_id, split, list(DISTINCT CAST(value AS BIGINT) ORDER BY CAST(value AS BIGINT)) AS n "
                     "FROM metrics WHERE run_id IN (?, ?) AND domain = 'all' AND name = 'n' GROUP BY run_id, split",
                     runs)
    return {(r, s): tuple(int(v) for v in n) for r, s, n in df.itertuples(index=False, name=None)}


def _task_sets(store: Store, runs: list[str]) -> dict[tuple[str, str], int]:
    """(run, split) -> a fingerprint of the set of task ids its traces cover, over every iteration (XOR of the ids'
    hashes: equal sets, equal fingerprints, whatever the order), for the splits that have traces."""
    df = store.query("SELECT run_id, split, bit_xor(hash(task_id)) AS fingerprint FROM "
                     "(SELECT DISTINCT run_id, split, task_id FROM eval_traces WHERE run_id IN (?, ?)) "
                     "GROUP BY run_id, split", runs)
    return {(r, s): int(f) for r, s, f in df.itertuples(index=False, name=None)}


NO_ROWS_NOTE = ("Run A (`{run_a}`) has no evaluation rows yet: the evaluation charts show run B's lines alone, "
                "and there is nothing to compare them with.")


def _count_text(counts: tuple[int, ...]) -> str:
    return str(counts[0]) if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"


def task_set_caution(store: Store, run_a: str | None, run_b: str | None) -> str:
    """The one-line caution when A and B were evaluated on different task sets, or the note that A has no evaluation
    rows (see the module docstring)."""
    if not run_a or not run_b or run_a == run_b:
        return ""
    runs = [run_a, run_b]
    counts, task_sets = _counts(store, runs), _task_sets(store, runs)
    # No task count for A: a third query, only then, tells "no evaluation rows" from rows without an n
    if not any(r == run_a for r, _ in counts) and not store.count("metrics", run_a):
        return NO_ROWS_NOTE.format(run_a=run_a)
    splits = sorted({s for r, s in counts if r == run_a} & {s for r, s in counts if r == run_b},
                    key=lambda s: (list(SPLIT_NAMES).index(s) if s in SPLIT_NAMES else len(SPLIT_NAMES), s))
    differences = []
    for split in splits:
        name, a, b = SPLIT_NAMES.get(split, split), counts[run_a, split], counts[run_b, split]
        if a != b:
            differences.append(f"{name} A {_count_text(a)} vs B {_count_text(b)} tasks")
        elif (run_a, split) in task_sets and (run_b, split) in task_sets \
                and task_sets[run_a, split] != task_sets[run_b, split]:
            differences.append(f"{name} {_count_text(a)} tasks each, not the same ones")
    if not differences:
        return ""
    return ("⚠ Runs A and B were evaluated on different task sets, so their accuracies are not directly "
            f"comparable: {'; '.join(differences)}.")


def run_a_label(text: str, run_a: str | None, run_b: str | None) -> str:
    """``text`` led by "run A: `<id>`" when a compare run other than A is drawn (the tables are A's alone)."""
    if not text or not run_a or not run_b or run_b == run_a:
        return text
    return f"**run A: `{run_a}`** · {text}"
