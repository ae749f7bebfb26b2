"""``python -m engine merge``: write a checkpoint as one plain model directory (full weights, no adapters).

Contract: ``merge --out DIR (PATH | --run R --iteration T --role planner|grounder [--db D])`` loads the checkpoint,
a LoRA run's adapter checkpoint included (its chain back to the full model, merged in order:
``engine.models.load_model``), and saves the merged weights and the tokenizer to ``DIR``, which must not exist yet;
prints ``{"out": DIR, "from": PATH, "adapters": N}``. A missing checkpoint, store (``error: no store at ...``, the
wording of every command), run or iteration, a directory that is not a model checkpoint transformers can load, or an
existing ``DIR``, prints ``error: ...`` on stderr and exits 2; a store that cannot be used (held by another process,
not a store) exits 3; nothing is written then (the weights are saved to ``DIR.partial`` and renamed into place). The
merged directory is what vLLM and other tools load.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine.commands._common import BAD_INPUT, DEFAULT_DB, print_json, store_missing, store_unusable

HELP = "Merge a checkpoint (a LoRA run's adapters included) into one plain model directory."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", nargs="?", default=None,
                        help="a checkpoint directory (or use --run/--iteration/--role)")
    parser.add_argument("--out", required=True, help="the directory to write (must not exist)")
    parser.add_argument("--db", default=DEFAULT_DB, help=f"DuckDB store (with --run; default: {DEFAULT_DB})")
    parser.add_argument("--run", default=None, help="the run whose checkpoint to merge")
    parser.add_argument("--iteration", type=int, default=None, help="with --run: the iteration that produced it")
    parser.add_argument("--role", choices=("planner", "grounder"), default=None,
                        help="with --run: which agent")
    parser.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16", "float16"),
                        help="weights' dtype (default: auto, as loaded)")


def _checkpoint_path(args: argparse.Namespace) -> str | None:
    """The checkpoint directory to merge: PATH, or the one the store records (``StoreError`` propagates)."""
    if args.path:
        return args.path
    from engine.store import Store

    if not (args.run and args.iteration is not None and args.role):
        print("error: give a checkpoint PATH, or --run, --iteration and --role", file=sys.stderr)
        return None
    if store_missing(args.db):
        return None
    with Store(args.db, read_only=True) as store:
        if store.get_run(args.run) is None:  # not "has no checkpoint": the run id itself is wrong
            print(f"error: {store.unknown_run(args.run, args.db)}", file=sys.stderr)
            return None
        found = store.checkpoint(args.run, args.iteration, args.role)
    if not found:
        print(f"error: run {args.run!r} has no {args.role} checkpoint for iteration {args.iteration}", file=sys.stderr)
        return None
    return found["path"]


def run(args: argparse.Namespace) -> int:
    import shutil

    from engine.models import ModelSpec, adapter_chain, load_model
    from engine.store import StoreError

    try:
        path = _checkpoint_path(args)
    except StoreError as exc:  # held by a running job, a newer schema, not a store
        return store_unusable(exc)
    if path is None:
        return BAD_INPUT
    out = Path(args.out)
    if out.exists():
        print(f"error: {out} exists; merge writes a new directory", file=sys.stderr)
        return BAD_INPUT
    if not Path(path).is_dir():
        print(f"error: {path} is not a checkpoint directory", file=sys.stderr)
        return BAD_INPUT
    try:
        _, adapters = adapter_chain(path)
        model, tokenizer = load_model(ModelSpec(path, dtype=args.dtype, device="cpu"))
    except (OSError, ValueError, KeyError) as exc:  # no config.json, an unknown model type, a broken adapter chain
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"error: {path} is not a model checkpoint this engine can load: {first}", file=sys.stderr)
        return BAD_INPUT
    partial = out.with_name(out.name + ".partial")
    try:
        model.save_pretrained(partial, safe_serialization=True)
        tokenizer.save_pretrained(partial)
        partial.rename(out)  # the directory appears whole or not at all
    except BaseException:  # a full disk or Ctrl-C: no half-written directory is left behind
        shutil.rmtree(partial, ignore_errors=True)
        raise
    print_json({"out": str(out), "from": str(path), "adapters": len(adapters)})
    return 0
