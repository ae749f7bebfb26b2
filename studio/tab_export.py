"""Export tab: the curated pairs (TRL preference format) or grounder SFT records of an iteration as JSONL or Parquet
through ``engine.export``, offered as a download, and pushed to a Hugging Face Hub dataset (``datasets``'
``push_to_hub``) when ``HF_TOKEN`` is set; without a token the tab says so.

Files go to the studio's own export directory (one temp directory per studio process, removed at exit); the
browser never sends a path, and the file name built from the run id, iteration, kind and format is confined to that
directory
(``engine.workspace.inside``). Exporting writes a file on the server and pushing writes to the Hub, so both are write
endpoints refused by ``check_writable`` for ``--read-only`` and viewers. The token is read from the environment at
push time and never rendered.

Handlers: ``export_file(store, run_id, iteration, kind, fmt, out_dir) -> (path, rows)``, ``push_to_hub``.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
from pathlib import Path

import gradio as gr

from engine import export
from engine.store import Store
from engine.workspace import inside
from studio.common import Ctx, check_writable, user_error, user_errors

KINDS = {"pairs": export.export_pairs, "sft": export.export_sft}


def export_file(store: Store, run_id: str, iteration: int, kind: str, fmt: str, out_dir: str | Path) -> tuple[Path,
                                                                                                             int]:
    """Write the export into ``out_dir`` (never elsewhere: ``ValueError`` for a bad kind/format or an escaping
    name) and return ``(path, rows)``."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}")
    if fmt not in export.FORMATS:
        raise ValueError(f"format must be one of {', '.join(export.FORMATS)}")
    name = re.sub(r"[^A-Za-z0-9._-]", "_", str(run_id))  # run ids are slugs; anything else cannot name a folder
    path = inside(out_dir, Path(out_dir) / f"{name}-it{int(iteration)}-{kind}.{fmt}", "the export file")
    return path, KINDS[kind](store, run_id, int(iteration), path, fmt)


def push_to_hub(store: Store, run_id: str, iteration: int, kind: str, repo_id: str, token: str | None) -> str:
    """Push the export to ``repo_id`` (a dataset repo); a message either way, never an exception for no token."""
    if not token:
        return "No HF_TOKEN in the studio's environment: download the file and upload it yourself."
    if not repo_id or "/" not in repo_id:
        return "Give the dataset repo as owner/name."
    import datasets

    with tempfile.TemporaryDirectory() as tmp:
        path, rows = export_file(store, run_id, iteration, kind, "parquet", tmp)
        datasets.Dataset.from_parquet(str(path)).push_to_hub(repo_id, token=token, split=f"iteration_{iteration}")
    return f"Pushed {rows} {kind} rows to https://huggingface.co/datasets/{repo_id} (split iteration_{iteration})."


def build(ctx: Ctx) -> None:
    out_dir = tempfile.mkdtemp(prefix="moat-export-")
    atexit.register(shutil.rmtree, out_dir, ignore_errors=True)  # the files are served from here until exit
    with gr.Row():
        kind = gr.Radio(list(KINDS), value="pairs", label="What", elem_id="export-kind")
        fmt = gr.Radio(list(export.FORMATS), value="jsonl", label="Format", elem_id="export-format")
        make = gr.Button("Export", variant="primary", elem_id="export-go", interactive=not ctx.read_only)
    message = gr.Markdown(elem_id="export-message")
    file = gr.File(label="Download", elem_id="export-file")
    has_token = bool(os.environ.get("HF_TOKEN"))
    gr.Markdown("HF_TOKEN found: pushing is enabled." if has_token else
                "Set `HF_TOKEN` in the studio's environment to push exports to the Hugging Face Hub.")
    with gr.Row():
        repo = gr.Textbox(label="Hub dataset repo (owner/name)", interactive=has_token and not ctx.read_only)
        push = gr.Button("Push to Hub", interactive=has_token and not ctx.read_only)

    def on_export(run_id, it, k, f, request: gr.Request):
        check_writable(ctx, request)
        if not run_id or it is None or ctx.store.get_run(run_id) is None:
            raise user_error("Pick a run and an iteration first.")
        with user_errors():
            path, rows = export_file(ctx.store, run_id, it, k, f, out_dir)
        return f"Exported {rows} {k} rows to `{path.name}`.", str(path)

    def on_push(run_id, it, k, repo_id, request: gr.Request) -> str:
        check_writable(ctx, request)
        return push_to_hub(ctx.store, run_id, it, k, repo_id, os.environ.get("HF_TOKEN"))

    make.click(on_export, [ctx.run, ctx.iteration, kind, fmt], [message, file], api_name="export_file")
    push.click(on_push, [ctx.run, ctx.iteration, kind, repo], message, api_name="export_push_hub")
