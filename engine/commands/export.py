"""``python -m engine export``: write curated DPO pairs or grounder SFT records of one iteration to a file.

Contract: ``export [--db D] --run R --iteration T --what pairs|sft|rollouts --format jsonl|parquet [--pairs-form
text|messages] --out FILE [--json]`` writes the rows of ``engine.export.export_pairs`` / ``export_sft`` (overrides
applied) / ``export_rollouts`` (a GRPO iteration's rollouts) atomically, with the mode ``open()`` would give the file,
and prints ``{"what", "format", "path", "rows"}`` (pairs: and ``"pairs_form"``; ``--json``) or a one-line summary (on
stderr when ``--out`` is stdout itself); exits 0. An SFT export holds the iteration's curated records only: a ``note:
not in the file: ...`` line on stderr names the original (warm-start) rows train_grounder mixes in beside them
(``sft.original_ratio``; ``engine.export_replay.replay_note``, which the studio's Export tab says too).
``--pairs-form`` (pairs only; default ``text``, the rendered strings train_planner trains on) ``messages`` writes TRL's
conversational preference format; an iteration whose planner prompts were rendered with the lumos layout gets a
``note:`` line on stderr that TRL renders messages with the tokenizer's template instead
(``engine.export.chat_template_note``, reading the iteration's ``planner.chat_template`` as the prompt check does).
Before anything is written, each messages prompt is rendered as the run rendered its prompts and compared with the
prompt stored with the plan: when any differs (plans sampled by older code or in another layout) or the planner's
tokenizer that check needs does not load, ``error: ...`` names how many pairs differ of how many and where the first
one parts, and the command exits 2, writing nothing (``engine.export.PromptMismatch``). ``--pairs-form`` with another
``--what`` is refused (exit 2). An unknown run, a missing DuckDB file, an iteration the run does not have, or a
``--out`` whose folder takes no new file prints ``error: ...`` on stderr and exits 2, writing nothing. So does an
iteration that cannot hold the rows asked for: iteration 0 samples and grounds no plans (no pairs, no SFT records), an
iteration that trained neither agent by GRPO has no rollouts, one whose grounder trained by GRPO has no SFT records
(its training data are its rollouts: ``--what rollouts``), and one whose pairs / ground / GRPO training stage is not
done has none yet (the message says which). When that stage is done but kept nothing (every pair filtered, or excluded
by curation), the empty file is the data: it is written, exit 0, and a ``note: 0 ... rows`` line on stderr says why. A
store that cannot be used (held by another process, a newer schema, not a store) exits 3, as in every command.
``--out`` may be any path: the caller owns the shell and its files, so the CLI is not confined to a workspace (the
studio, which takes requests from browsers, is; see ``engine.workspace``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine.commands._common import (
    BAD_INPUT,
    DEFAULT_DB,
    print_json,
    store_missing,
    summary_stream,
    writable_file,
)
from engine.export_empty import NOUNS, empty_reason
from engine.export_forms import FORMATS, PAIRS_FORMS  # not from engine.export: pyarrow, for every `--help`

HELP = "Export an iteration's curated DPO pairs, grounder SFT records or GRPO rollouts as JSONL or Parquet."



def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", default=DEFAULT_DB, help=f"DuckDB store (default: {DEFAULT_DB})")
    parser.add_argument("--run", required=True, help="run id (see `python -m engine status`)")
    parser.add_argument("--iteration", required=True, type=int, help="iteration whose data to export")
    parser.add_argument("--what", required=True, choices=("pairs", "sft", "rollouts"),
                        help="DPO pairs, grounder SFT records, or the rollouts of a GRPO iteration")
    parser.add_argument("--format", default=None, choices=FORMATS,
                        help="output format (default: from --out's name, .parquet or .jsonl/.json; another name "
                             "needs --format, and a name that says the other format is refused)")
    parser.add_argument("--pairs-form", default=None, choices=PAIRS_FORMS,
                        help="pairs only: text (default), the rendered prompt and plan strings DPO trained on; or "
                             "messages, TRL's conversational preference format (prompt/chosen/rejected as "
                             "role/content message lists, rendered by the trainer with the tokenizer's chat template)")
    parser.add_argument("--out", required=True, metavar="FILE", type=writable_file,
                        help="output file (written atomically)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from engine.commands._common import store_unusable
    from engine.errors import CheckpointError
    from engine.export import PromptMismatch, chat_template_note, left_out, rows_of, write_rows
    from engine.export_replay import replay_note
    from engine.store import Store, StoreError

    if store_missing(args.db):  # bad input (2); a file that cannot be used as a store is 3
        return BAD_INPUT
    # From the file's name when not given: "--out pairs.parquet" wrote JSONL into a .parquet file. A name that says
    # one format while the flag says the other, or a format that is neither (pairs.csv), is refused before the work.
    suffix = Path(args.out).suffix.lower()
    named = {".parquet": "parquet", ".jsonl": "jsonl", ".json": "jsonl"}.get(suffix)
    if suffix and named is None and args.format is None:
        print(f"error: --out {args.out}: a {suffix} file is neither JSONL nor Parquet: name it .jsonl or .parquet, or "
              "give --format", file=sys.stderr)
        return 2
    if named and args.format and named != args.format:
        print(f"error: --format {args.format} would write {args.format} into {args.out}, whose name says {named}",
              file=sys.stderr)
        return 2
    args.format = args.format or named or "jsonl"
    if args.pairs_form is not None and args.what != "pairs":  # sft records are always messages, rollouts text
        print(f"error: --pairs-form applies to --what pairs only, not {args.what}", file=sys.stderr)
        return 2
    pairs_form = args.pairs_form or "text"
    note = None
    form_note = ""
    try:
        with Store(args.db, read_only=True) as store:
            if store.get_run(args.run) is None:
                print(f"error: {store.unknown_run(args.run, args.db)}", file=sys.stderr)
                return 2
            if args.iteration not in store.iterations(args.run):  # it wrote an empty file and said "wrote 0"
                print(f"error: run {args.run!r} has no iteration {args.iteration} (its iterations: "
                      f"{', '.join(map(str, store.iterations(args.run))) or 'none yet'})", file=sys.stderr)
                return 2
            try:
                rows = rows_of(args.what, store, args.run, args.iteration, pairs_form)
            except (PromptMismatch, CheckpointError) as exc:  # messages that are not the prompts the planner saw
                print(f"error: --pairs-form {pairs_form}: {exc}; nothing written", file=sys.stderr)
                return 2
            if args.what == "pairs" and pairs_form == "messages":
                form_note = chat_template_note(store, args.run, args.iteration)
            kept_out = left_out(store, args.run, args.iteration, args.what)
            replayed = replay_note(store, args.run, args.iteration, args.what)  # rows training adds, not in the file
            if not rows:
                # An empty file with exit 0 read as "exported, nothing to train on" for data the iteration can
                # never have (iteration 0's pairs, a DPO iteration's rollouts) or does not have yet.
                reason = empty_reason(store, args.run, args.iteration, args.what)
                if reason is not None:
                    print(f"error: --iteration {args.iteration} --what {args.what}: {reason}; nothing written",
                          file=sys.stderr)
                    return 2
                note = (f"note: 0 {args.what} rows: iteration {args.iteration} made its {NOUNS[args.what]} and none "
                        "is left to export (filtered out by the stage, or excluded or tied by curation)")
    except StoreError as exc:  # held by another process, a newer schema, not a store
        return store_unusable(exc)
    try:
        write_rows(args.what, rows, args.out, args.format, pairs_form)
    except OSError as exc:  # a folder that takes no new file (/proc, read-only), a full disk: nothing is left behind
        print(f"error: --out: cannot write {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if note:
        print(note, file=sys.stderr)
    if form_note:
        print(f"note: {form_note}", file=sys.stderr)
    if replayed:
        print(f"note: {replayed}", file=sys.stderr)
    result = {"what": args.what, "format": args.format, "path": args.out, "rows": len(rows)}
    if args.what == "pairs":
        result["pairs_form"] = pairs_form
    stream = summary_stream(args.out)
    if args.json:
        print_json(result, file=stream)
    else:
        form = f", {pairs_form} form" if args.what == "pairs" else ""
        print(f"wrote {len(rows)} {args.what} rows to {args.out} ({args.format}{form})"
              + (f"; left out: {kept_out}" if kept_out else ""), file=stream)
    return 0
