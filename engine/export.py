"""Export curated training data as files TRL and ``datasets`` load directly.

Contract:

* ``export_pairs(store, run_id, iteration, path, fmt, form)`` writes one TRL preference row per effective pair that is
  neither excluded nor a tie: ``{"prompt", "chosen", "rejected", "chosen_logppl", "rejected_logppl", "task_id",
  "step"}``. ``form="text"`` (the default; what train_planner's DPO reads): ``prompt`` is the stored planner prompt of
  the chosen plan (``plans.prompt``, the rendered chat the plan was sampled from), ``chosen``/``rejected`` the raw plan
  texts. ``form="messages"``: TRL's conversational preference format, ``prompt`` the planner chat before rendering
  (``turns.planner_step_messages``, the layout the sample stage rendered: the onetime user turn, or for an iterative
  step the gold history before it) and ``chosen``/``rejected`` one assistant message each with the raw plan text. TRL
  renders it with the tokenizer's chat template, which gives the stored prompt when the iteration's
  ``planner.chat_template`` is ``"tokenizer"`` (``chat_template_note`` says when it may not). Every rebuilt chat is
  first rendered as the iteration's sample stage rendered it (``turns.planner_step_prompt`` with the iteration's
  ``planner.chat_template``, its curriculum phase applied, and, where the rendering reads it, the tokenizer of the
  checkpoint that stage loaded) and compared with the stored prompt: any difference (a run sampled by older code or in
  another layout) raises ``PromptMismatch`` (a ``ValueError``: how many pairs differ of how many, the first one's task,
  step and iteration, and the character offset where it parts), a tokenizer that does not load ``CheckpointError``;
  nothing is returned.
* ``export_sft(store, run_id, iteration, path, fmt)`` writes ``{"messages": [...], "task_id", "step", "k"}`` chat
  records from ``verdict_curation.effective_sft_records``, rendered as the train_grounder stage renders them
  (``turns.grounding_messages``: the iterative layout, with the gold history, for a step >= 1).
* ``export_rollouts(store, run_id, iteration, path, fmt)`` writes the GRPO rollouts of an iteration that trained
  either agent by GRPO (``stages.planner_objective`` or ``stages.grounder_objective = grpo``), both roles' in one
  file: ``{"prompt", "completion", "task_id", "role", "batch", "n", "rewards", "reward", "advantage"}`` (``role``:
  ``planner`` or ``grounder``; ``prompt``: that role's prompt, the planner's for a plan, the grounder's for an action
  sequence; ``rewards``: each named reward as a JSON object text).
* ``fmt`` is ``"jsonl"`` or ``"parquet"``; files are written by ``engine.out_files.write_file``: a regular file (a
  symlink's target, the link kept) through a temp file renamed into place, so a reader never sees half a file;
  anything else (``/dev/stdout``, ``/dev/fd/N``, a FIFO) straight into it. Each returns the number of rows written;
  the files load with ``datasets.load_dataset("json" | "parquet", data_files=path)``.
* A written file has the mode ``open(path, "w")`` would give it: the replaced file's, else ``0o666`` less the umask
  (not the ``0o600`` of a private temp file). A folder that takes no new file raises ``OSError`` before anything is
  written; ``probe_folder(path)`` asks the same up front, for callers with long work before the write.
* ``left_out(store, run_id, iteration, what)`` says in words what curation kept out of an export (tied or excluded
  pairs, verdicts without a record), for the line that reports it.
* ``rows_of(what, store, run_id, iteration, pairs_form)`` (``ROWS[what]`` for the default form) and
  ``write_rows(what, rows, path, fmt, pairs_form)`` split each export in two (what ``python -m engine export`` does,
  to look at the rows before it writes them).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from engine.export_forms import FORMATS, PAIRS_FORMS
from engine.out_files import probe_out, write_file
from engine.outcome import gold_step_results
from engine.store import Store
from engine.turns import Agent, grounding_messages, planner_step_messages, planner_step_prompt
from engine.verdict_curation import effective_sft_records
from engine.views import EFFECTIVE_PAIRS_SQL

if TYPE_CHECKING:
    from engine.config import RunConfig

PAIR_COLUMNS = ("prompt", "chosen", "rejected", "chosen_logppl", "rejected_logppl", "task_id", "step")

_PAIRS_SQL = """
SELECT pc.prompt AS prompt, pc.text AS chosen, pr.text AS rejected, e.chosen_logppl, e.rejected_logppl,
       e.task_id, e.step
FROM eff e
JOIN plans pc ON pc.run_id = $run AND pc.iteration = $it AND pc.task_id = e.task_id AND pc.step = e.step
    AND pc.k = e.chosen_k
JOIN plans pr ON pr.run_id = $run AND pr.iteration = $it AND pr.task_id = e.task_id AND pr.step = e.step
    AND pr.k = e.rejected_k
WHERE NOT e.excluded AND NOT e.tie
ORDER BY e.task_id, e.step, e.pair_idx
"""


class PromptMismatch(ValueError):
    """Conversational pairs whose rebuilt planner chat, rendered as the run rendered its prompts, is not the prompt
    stored with the plan (``plans.prompt``): the messages would not be what the planner was sampled and trained on."""


def pair_rows(store: Store, run_id: str, iteration: int, form: str = "text") -> list[dict[str, Any]]:
    """The TRL preference rows ``export_pairs`` writes, in ``form`` (``PAIRS_FORMS``; see the module docstring).
    ``form="messages"`` raises ``PromptMismatch`` when any row's rebuilt chat does not render to its stored prompt,
    and ``CheckpointError`` when the planner's tokenizer that check needs does not load (``_sampled_planner``)."""
    if form not in PAIRS_FORMS:
        raise ValueError(f"pairs form must be one of {', '.join(PAIRS_FORMS)}, got {form!r}")
    df = store.query(EFFECTIVE_PAIRS_SQL + _PAIRS_SQL, {"run": run_id, "it": iteration})
    rows = [
        {
            "prompt": r["prompt"],
            "chosen": r["chosen"],
            "rejected": r["rejected"],
            "chosen_logppl": float(r["chosen_logppl"]),
            "rejected_logppl": float(r["rejected_logppl"]),
            "task_id": r["task_id"],
            "step": int(r["step"]),
        }
        for r in df.to_dict("records")
    ]
    return rows if form == "text" else _as_messages(store, run_id, iteration, rows)


def _as_messages(store: Store, run_id: str, iteration: int, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` in TRL's conversational preference format. The prompt is rebuilt from the task and step with the
    function the sample stage rendered ``plans.prompt`` from (not parsed back out of the rendered text, which a
    tokenizer's template need not make reversible), then rendered as the sample stage renders it and compared with
    the stored prompt: a run sampled by older code or in another layout would otherwise export, silently, chats the
    planner never saw. Any difference raises ``PromptMismatch`` before a row is returned."""
    tasks: dict[str, Any] = {}
    results: dict[str, list[str]] = {}
    built = []
    for row in rows:
        task_id, step = row["task_id"], row["step"]
        if task_id not in tasks:
            tasks[task_id] = store.get_task(run_id, task_id)
        if step and task_id not in results:  # an iterative step's prompt shows the executed gold results before it
            results[task_id] = gold_step_results(tasks[task_id])
        built.append(planner_step_messages(tasks[task_id], step, results.get(task_id, [])))
    if rows:
        # The lumos layout reads the tokenizer only for the EOS after an assistant turn: a onetime run's prompts
        # (one user turn each) are checked without loading it, so they export where the model is not at hand.
        needs = any(m["role"] == "assistant" for messages in built for m in messages)
        planner = _sampled_planner(store, run_id, iteration, needs)
        differ = [(row, rendered) for row in rows
                  if (rendered := planner_step_prompt(planner, tasks[row["task_id"]], row["step"],
                                                      results.get(row["task_id"], []))) != row["prompt"]]
        if differ:
            raise PromptMismatch(_mismatch_message(run_id, iteration, planner.chat_template, len(rows), differ))
    return [{**row, "prompt": prompt, "chosen": [{"role": "assistant", "content": row["chosen"]}],
             "rejected": [{"role": "assistant", "content": row["rejected"]}]}
            for row, prompt in zip(rows, built, strict=True)]


def _sampled_planner(store: Store, run_id: str, iteration: int, needs_tokenizer: bool) -> Agent:
    """The planner of ``iteration``'s sample stage as far as rendering goes: its ``planner.chat_template`` (the
    iteration's config, phase settings applied) and, when ``needs_tokenizer`` or that template is ``"tokenizer"``,
    the tokenizer of the checkpoint the stage loaded (``StageContext.agent_path``). No model is loaded.
    ``CheckpointError`` (naming ``planner.path``) when that tokenizer does not load."""
    run = store.get_run(run_id) or {}
    config = _iteration_config(run, iteration)
    section = config.planner
    if not needs_tokenizer and section.chat_template == "lumos":
        return Agent(None, None, section.chat_template)
    from engine.errors import CheckpointError
    from engine.models import load_tokenizer
    from engine.stages.context import StageContext

    ctx = StageContext(store, run_id, iteration, config, Path(run.get("run_dir") or "."), stage="sample")
    path = ctx.agent_path("planner", iteration)
    path = (section.adapter or path) if path == section.path else path  # as runtime.load_agent loads it
    try:
        tokenizer = load_tokenizer(path)
    except Exception as exc:  # transformers raises OSError, ValueError... for a tokenizer that is gone or broken
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise CheckpointError("planner.path", f"{path}: the tokenizer the sample stage of iteration {iteration} "
                                              f"rendered its prompts with does not load ({first}), so the messages "
                                              "cannot be checked against the stored prompts; the text form writes "
                                              "the stored prompts as they are") from None
    return Agent(None, tokenizer, section.chat_template)


def _iteration_config(run: dict[str, Any], iteration: int) -> RunConfig:
    """The config ``iteration`` of ``run`` (a ``Store.get_run`` dict) ran under: its phase's settings applied."""
    from engine.schedule import iteration_config
    from engine.stored_config import stored_config

    return iteration_config(stored_config(run.get("config") or {}), iteration)


def _mismatch_message(run_id: str, iteration: int, template: str, total: int,
                      differ: list[tuple[dict[str, Any], str]]) -> str:
    """How many pairs differ, and where the first one does: its task, step and iteration and the first character
    offset at which the stored and the rebuilt prompt part, with a few characters of each from there."""
    row, rendered = differ[0]
    stored = row["prompt"]
    at = len(os.path.commonprefix([stored, rendered]))
    return (f"run {run_id!r} iteration {iteration}: {len(differ)} of {total} pairs' planner prompts, rebuilt as "
            f"messages and rendered as the run renders them (planner.chat_template = \"{template}\"), differ from "
            f"the prompts their plans were sampled from (plans.prompt); first: task {row['task_id']!r}, step "
            f"{row['step']}, iteration {iteration}, from character {at} (stored {stored[at:at + 30]!r}, rebuilt "
            f"{rendered[at:at + 30]!r}). The plans were sampled by other code or in another prompt layout, so these "
            "messages are not what the planner saw: the text form writes the stored prompts")


def chat_template_note(store: Store, run_id: str, iteration: int) -> str:
    """A caution for a conversational pairs export of ``run_id``'s ``iteration`` ("" when none is due). Its prompts
    were rendered with the lumos layout (``planner.chat_template = "lumos"``, the default) rather than the tokenizer's
    template, and TRL renders messages with the tokenizer's template only: the same text only where that template
    reproduces the layout. A ``"tokenizer"`` iteration rendered its prompts with that very template. The template is
    the iteration's, read as the prompt check reads it (``_iteration_config``: its curriculum phase applied), so the
    note and the check never speak of two layouts."""
    if _iteration_config(store.get_run(run_id) or {}, iteration).planner.chat_template == "tokenizer":
        return ""
    return ("this run rendered its planner prompts with the lumos layout (planner.chat_template = \"lumos\"), and "
            "TRL renders these messages with the tokenizer's own chat template: the same prompt text only if that "
            "template reproduces the lumos layout (the text form is the text the planner trained on)")


def sft_rows(store: Store, run_id: str, iteration: int) -> list[dict[str, Any]]:
    """The grounder chat records ``export_sft`` writes, each in the layout the grounder trained on
    (``engine.turns.grounding_messages``: a onetime plan as one turn; an iterative step after the gold history of the
    steps before it, so its ``R1`` .. ``R{s-1}`` are defined in the record)."""
    tasks: dict[str, Any] = {}
    results: dict[str, list[str]] = {}
    rows = []
    for rec in effective_sft_records(store, run_id, iteration):
        task_id, step = rec["task_id"], int(rec["step"])
        if task_id not in tasks:
            tasks[task_id] = store.get_task(run_id, task_id)
        if step and task_id not in results:
            results[task_id] = gold_step_results(tasks[task_id])
        messages = grounding_messages(tasks[task_id], step, rec["subgoals"], results.get(task_id, []),
                                      rec["actions"])
        rows.append({"messages": messages, "task_id": task_id, "step": step, "k": int(rec["k"])})
    return rows


PAIRS_SCHEMA = pa.schema(
    [
        ("prompt", pa.string()),
        ("chosen", pa.string()),
        ("rejected", pa.string()),
        ("chosen_logppl", pa.float64()),
        ("rejected_logppl", pa.float64()),
        ("task_id", pa.string()),
        ("step", pa.int64()),
    ]
)
_MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string())])
PAIRS_MESSAGES_SCHEMA = pa.schema(
    [
        ("prompt", pa.list_(_MESSAGE)),
        ("chosen", pa.list_(_MESSAGE)),
        ("rejected", pa.list_(_MESSAGE)),
        ("chosen_logppl", pa.float64()),
        ("rejected_logppl", pa.float64()),
        ("task_id", pa.string()),
        ("step", pa.int64()),
    ]
)
SFT_SCHEMA = pa.schema([("messages", pa.list_(_MESSAGE)), ("task_id", pa.string()), ("step", pa.int64()),
                        ("k", pa.int64())])
ROLLOUTS_SCHEMA = pa.schema([("prompt", pa.string()), ("completion", pa.string()), ("task_id", pa.string()),
                             ("role", pa.string()), ("batch", pa.int64()), ("n", pa.int64()),
                             ("rewards", pa.string()), ("reward", pa.float64()), ("advantage", pa.float64())])


def rollout_rows(store: Store, run_id: str, iteration: int) -> list[dict[str, Any]]:
    """The rows ``export_rollouts`` writes, in the trainer's order."""
    frame = store.frame("rollouts", run_id, iteration)
    return [{"prompt": r.prompt, "completion": r.text, "task_id": r.task_id, "role": r.role, "batch": int(r.batch),
             "n": int(r.n),
             "rewards": r.rewards_json, "reward": None if r.reward != r.reward else float(r.reward),
             "advantage": float(r.advantage)} for r in frame.itertuples(index=False)]


def left_out(store: Store, run_id: str, iteration: int, what: str) -> str:
    """What curation kept out of an export, in words ("1 tied, 2 excluded"; "" when nothing): the pairs excluded or
    tied, or the verdicts that give no SFT record (unfixable, or dropped by a curator). Rollouts: always ""."""
    if what == "pairs":
        eff = store.effective_pairs(run_id, iteration)
        tied, excluded = int(eff["tie"].sum()), int((eff["excluded"] & ~eff["tie"]).sum())
        return ", ".join(f"{n} {word}" for n, word in ((tied, "tied"), (excluded, "excluded")) if n)
    if what == "sft":
        missing = store.count("verdicts", run_id, iteration) - len(effective_sft_records(store, run_id, iteration))
        return f"{missing} verdict(s) with no record (unfixable, or dropped by a curator)" if missing > 0 else ""
    return ""


ROWS: dict[str, Callable[[Store, str, int], list[dict[str, Any]]]] = {
    "pairs": pair_rows, "sft": sft_rows, "rollouts": rollout_rows}
SCHEMAS: dict[str, pa.Schema] = {"pairs": PAIRS_SCHEMA, "sft": SFT_SCHEMA, "rollouts": ROLLOUTS_SCHEMA}


def rows_of(what: str, store: Store, run_id: str, iteration: int, pairs_form: str = "text") -> list[dict[str, Any]]:
    """The rows of export ``what``; ``pairs_form`` picks the pairs' form (the other exports have one form each)."""
    if what == "pairs":
        return pair_rows(store, run_id, iteration, pairs_form)
    return ROWS[what](store, run_id, iteration)


def write_rows(what: str, rows: list[dict[str, Any]], path: str | Path, fmt: str = "jsonl",
               pairs_form: str = "text") -> int:
    """Write ``rows`` of ``rows_of(what, ..., pairs_form)`` to ``path`` (atomically, see the module docstring);
    returns their number. ``pairs_form`` types the Parquet columns of pairs (strings or message lists)."""
    schema = PAIRS_MESSAGES_SCHEMA if what == "pairs" and pairs_form == "messages" else SCHEMAS[what]
    return _write(rows, path, fmt, schema)


def export_pairs(store: Store, run_id: str, iteration: int, path: str | Path, fmt: str = "jsonl",
                 form: str = "text") -> int:
    return write_rows("pairs", pair_rows(store, run_id, iteration, form), path, fmt, form)


def export_sft(store: Store, run_id: str, iteration: int, path: str | Path, fmt: str = "jsonl") -> int:
    return write_rows("sft", sft_rows(store, run_id, iteration), path, fmt)


def export_rollouts(store: Store, run_id: str, iteration: int, path: str | Path, fmt: str = "jsonl") -> int:
    return write_rows("rollouts", rollout_rows(store, run_id, iteration), path, fmt)


def probe_folder(path: str | Path) -> None:
    """Raise the ``OSError`` writing ``path`` would meet at its first step (the folder takes no new file), leaving
    nothing behind: a command that works for minutes before it writes asks first (``engine.out_files.probe_out``)."""
    probe_out(path)


def _write(rows: list[dict[str, Any]], path: str | Path, fmt: str, schema: pa.Schema) -> int:
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "jsonl":
        replace_file(path, "w", lambda out: _write_jsonl(rows, out))
    else:
        replace_file(path, "wb", lambda out: pq.write_table(pa.Table.from_pylist(rows, schema=schema), out))
    return len(rows)


def write_jsonl(rows: Iterable[dict[str, Any]], path: str | Path) -> int:
    """Write ``rows`` as JSONL to ``path`` as the exports are written (temp file, rename, ``open()``'s mode)."""
    rows = list(rows)
    replace_file(Path(path), "w", lambda out: _write_jsonl(rows, out))
    return len(rows)


def replace_file(path: Path, mode: str, fill: Callable[[Any], object]) -> None:
    """Run ``fill`` on ``path`` opened with ``mode`` through ``engine.out_files.write_file``: for a regular file a temp
    file beside it (a symlink's target), renamed over it; on any error the temp file is removed and the file is
    untouched (also ``engine.eval_cache``'s writer)."""
    write_file(path, mode, fill)


def _write_jsonl(rows: Iterable[dict[str, Any]], out: Any) -> None:
    for row in rows:
        out.write(json.dumps(row, ensure_ascii=False) + "\n")
