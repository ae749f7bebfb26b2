"""Export tab: the curated pairs (TRL preference format) or grounder SFT records of an iteration as JSONL or Parquet
through ``engine.export``, offered as a download, and pushed to a Hugging Face Hub dataset (``datasets``'
``push_to_hub``) when ``HF_TOKEN`` is set; without a token the tab says so. Never on Spaces: the token there is the
Space owner's and the visitors anonymous (the push is off and refused over the API too). Pairs come in either form
(``engine.export.PAIRS_FORMS``, as ``export --pairs-form``): ``text``, the rendered strings the planner trained on,
or ``messages``, TRL's conversational preference format; the download and the Hub push carry the form picked, and a
messages file is named ``...-pairs-messages.<format>`` so it never replaces the text one.

Files go to the studio's own export directory (one temp directory per studio process, removed at exit); the
browser never sends a path, and the file name built from the run id, iteration, kind and format is confined to that
directory
(``engine.workspace.inside``). Exporting writes a file on the server and pushing writes to the Hub, so both are write
endpoints refused by ``check_writable`` for ``--read-only`` and viewers. The token is read from the environment at
push time and never rendered.

An iteration that cannot hold the rows asked for (iteration 0's pairs) or not yet (its stage has not run) is refused
with the reason and nothing is written (``NothingToExport``, as ``python -m engine export`` refuses it); an empty
export of a stage that ran and kept nothing is written and said to be so. On the page (and to an API client of
``export_file``) the refusal is an answer, not an error: its reason on the message line ("Nothing exported: ...")
and no file, where a success always carries its file (an empty one included). Raised as a ``gr.Error``, the reason
showed only in a toast that faded and a red "Error" pill stayed on the emptied download box. The export's progress
shows on the message line only (``show_progress_on``), so an error still raised (a bad input from an API client)
never leaves that pill on the download box either.

An SFT export holds the iteration's curated records only: the original (warm-start) rows that train_grounder mixes
in beside them (``sft.original_ratio``) are not in the file, and the export's message says so (``replay_note``,
as ``python -m engine export`` does: ``engine.export_replay``).
The pairs-form radio applies to pairs only and is off while SFT is picked.

Each click first clears the message and the download in the browser (the ``export_file_clear`` and
``export_push_hub_clear`` listeners, js only, registered before the button's write): an export that raises a
``gr.Error`` (a bad input) leaves a handler's outputs as they were, and the previous export's line and file stayed
under the error as if the failed one had made them.

Handlers: ``export_path``, ``export_file(store, run_id, iteration, kind, fmt, out_dir, pairs_form="text") -> (path,
rows)``, ``replay_note``, ``push_to_hub`` (to the config ``hub_config_name`` names: ``pairs``, ``pairs_messages``,
``sft``, ...; one split per iteration). The pairs-form radio is the last input of the ``export_file`` and
``export_push_hub`` endpoints, so an API client that sends the earlier inputs alone gets the text form, as before.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
from pathlib import Path

import gradio as gr

from engine import export, export_replay
from engine.export_empty import NOUNS, empty_reason
from engine.store import Store
from engine.workspace import inside
from studio.common import Ctx, check_writable, user_error, user_errors

KINDS = ("pairs", "sft")  # engine.export.ROWS keys the tab offers (a GRPO iteration's rollouts: the CLI's)


class NothingToExport(ValueError):
    """The iteration cannot hold the rows asked for, or not yet (``engine.export_empty.empty_reason``)."""


def export_path(run_id: str, iteration: int, kind: str, fmt: str, out_dir: str | Path,
                pairs_form: str = "text") -> Path:
    """The export's file in ``out_dir`` (never elsewhere: ``ValueError`` for a bad kind/format/pairs form or an
    escaping name). Conversational pairs end ``-pairs-messages``; every other name is as it always was."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}")
    if fmt not in export.FORMATS:
        raise ValueError(f"format must be one of {', '.join(export.FORMATS)}")
    if pairs_form not in export.PAIRS_FORMS:
        raise ValueError(f"pairs form must be one of {', '.join(export.PAIRS_FORMS)}")
    name = re.sub(r"[^A-Za-z0-9._-]", "_", str(run_id))  # run ids are slugs; anything else cannot name a folder
    what = "pairs-messages" if kind == "pairs" and pairs_form == "messages" else kind
    return inside(out_dir, Path(out_dir) / f"{name}-it{int(iteration)}-{what}.{fmt}", "the export file")


def export_file(store: Store, run_id: str, iteration: int, kind: str, fmt: str, out_dir: str | Path,
                pairs_form: str = "text") -> tuple[Path, int]:
    """Write the export into ``export_path(...)`` and return ``(path, rows)``; ``pairs_form`` picks the pairs' form
    and is ignored for SFT records (always messages). An export with no rows is written only
    when the stage that makes them is done (it kept none: the empty file is the data); otherwise
    ``NothingToExport`` says why (iteration 0's pairs, a stage not run yet) and nothing is written, as the CLI
    refuses it. A download of an empty file read as "nothing to train on"."""
    path = export_path(run_id, iteration, kind, fmt, out_dir, pairs_form)
    rows = export.rows_of(kind, store, run_id, int(iteration), pairs_form)
    if not rows:
        reason = empty_reason(store, run_id, int(iteration), kind, studio=True)
        if reason is not None:
            raise NothingToExport(f"Nothing exported: {reason}.")
    return path, export.write_rows(kind, rows, path, fmt, pairs_form)


def form_caution(store: Store, run_id: str, iteration: int, kind: str, pairs_form: str) -> str:
    """The sentence added after an export's message about how TRL renders conversational pairs ("" when none is
    due: text pairs, SFT records, or an iteration whose prompts came from the tokenizer's own template)."""
    if kind != "pairs" or pairs_form != "messages":
        return ""
    note = export.chat_template_note(store, run_id, int(iteration))
    return f" Note: {note[:1].upper()}{note[1:]}." if note else ""


def replay_note(store: Store, run_id: str, iteration: int, kind: str) -> str:
    """The sentence added after an SFT export's message about the original (warm-start) rows train_grounder mixes in
    beside the exported records, which the file does not hold (``engine.export_replay.replay_note``, which the CLI
    prints too); "" when there are none to mention."""
    note = export_replay.replay_note(store, run_id, int(iteration), kind)
    return f" {note[:1].upper()}{note[1:]}." if note else ""


def push_to_hub(store: Store, run_id: str, iteration: int, kind: str, repo_id: str, token: str | None,
                pairs_form: str = "text") -> str:
    """Push the export (pairs in ``pairs_form``) to ``repo_id`` (a dataset repo); a message either way, never an
    exception for no token."""
    if not token:
        return "No HF_TOKEN in the studio's environment: download the file and upload it yourself."
    if not repo_id or "/" not in repo_id:
        return "Give the dataset repo as owner/name."
    import datasets

    with tempfile.TemporaryDirectory() as tmp:
        try:
            path, rows = export_file(store, run_id, iteration, kind, "parquet", tmp, pairs_form)
        except NothingToExport as exc:
            return str(exc)
        config = hub_config_name(kind, pairs_form)
        datasets.Dataset.from_parquet(str(path)).push_to_hub(repo_id, config_name=config, token=token,
                                                             split=f"iteration_{iteration}")
    form = f" ({pairs_form} form)" if kind == "pairs" else ""
    return (f"Pushed {rows} {NOUNS[kind]}{form} to https://huggingface.co/datasets/{repo_id} (config {config}, split "
            f"iteration_{iteration}).")


def hub_config_name(kind: str, pairs_form: str) -> str:
    """The Hub dataset config a push goes to: one per kind of row and pair form, so every config's splits share one
    schema. Into one config, an SFT push would replace the pairs' split of the same iteration, and messages pairs
    would sit beside text ones under one set of features, which the Hub's viewer and ``load_dataset`` refuse."""
    return f"{kind}_messages" if kind == "pairs" and pairs_form == "messages" else kind


def build(ctx: Ctx) -> None:
    out_dir = tempfile.mkdtemp(prefix="moat-export-")
    atexit.register(shutil.rmtree, out_dir, ignore_errors=True)  # the files are served from here until exit
    with gr.Row():
        kind = gr.Radio(list(KINDS), value="pairs", label="What", elem_id="export-kind")
        fmt = gr.Radio(list(export.FORMATS), value="jsonl", label="Format", elem_id="export-format")
        pairs_form = gr.Radio(list(export.PAIRS_FORMS), value="text", label="Pairs form",
                              info="text: the rendered prompt and plan strings the planner trained on; messages: "
                                   "TRL's conversational format (role/content lists, rendered by the trainer with "
                                   "the tokenizer's chat template)", elem_id="export-pairs-form")
        make = gr.Button("Export", variant="primary", elem_id="export-go", interactive=not ctx.read_only)
    message = gr.Markdown(elem_id="export-message")
    file = gr.File(label="Download", elem_id="export-file")
    # On Spaces the token is the Space owner's secret and every visitor is anonymous: a push would write any dataset
    # the owner's token can, under the owner's name. Downloads stay.
    has_token = bool(os.environ.get("HF_TOKEN")) and not ctx.spaces
    if ctx.spaces:
        gr.Markdown("Pushing to the Hugging Face Hub is off on Spaces (it would use the Space owner's token); "
                    "download the file and push it from your own machine.")
    else:
        gr.Markdown("HF_TOKEN found: pushing is enabled." if has_token else
                    "Set `HF_TOKEN` in the studio's environment to push exports to the Hugging Face Hub.")
    with gr.Row():
        repo = gr.Textbox(label="Hub dataset repo (owner/name)", interactive=has_token and not ctx.read_only)
        push = gr.Button("Push to Hub", interactive=has_token and not ctx.read_only)
    ctx.write_controls += [make, repo, push]  # off for a viewer (studio.app)

    def on_export(run_id, it, k, f, form, request: gr.Request):
        check_writable(ctx, request)
        if not run_id or ctx.store.get_run(run_id) is None:
            raise user_error("Pick a run first.")
        if it is None:  # the picker fills a moment after the run does (a click right after the page loads)
            raise user_error(f"Pick an iteration of {run_id} first: its picker above is still empty.")
        form = form or "text"  # an API client that leaves the radio out: the form exports had before it existed
        with user_errors():
            try:
                path, rows = export_file(ctx.store, run_id, it, k, f, out_dir, form)
            except NothingToExport as exc:  # an answer, not an error: the reason stays on the line, no file
                return str(exc), None
        if not rows:  # the stage ran and kept nothing: say so beside the (empty) file
            return (f"Exported 0 {NOUNS[k]} to `{path.name}`: iteration {int(it)} made its {NOUNS[k]} and none is "
                    "left to export (filtered out by the stage, or excluded or tied by curation).", str(path))
        kept_out = export.left_out(ctx.store, run_id, int(it), k)
        return (f"Exported {rows} {NOUNS[k]} to `{path.name}`" + (f"; left out: {kept_out}." if kept_out else ".")
                + form_caution(ctx.store, run_id, it, k, form) + replay_note(ctx.store, run_id, it, k), str(path))

    def on_push(run_id, it, k, repo_id, form, request: gr.Request) -> str:
        check_writable(ctx, request)
        if ctx.spaces:  # the button is off; an API client gets the same answer
            return "Refused on Spaces: pushing would use the Space owner's token. Download the file instead."
        with user_errors():  # a bad pairs form from an API client: its message, not a stack trace
            return push_to_hub(ctx.store, run_id, it, k, repo_id, os.environ.get("HF_TOKEN"), form or "text")

    # SFT records are always chat messages: the pairs' form does not apply to them.
    kind.change(lambda k: gr.update(interactive=k == "pairs"), kind, pairs_form, api_name="export_kind",
                api_visibility="undocumented", show_progress="hidden")
    # Cleared in the browser first: a refusal (gr.Error) changes no output, so the last export's line and file stayed
    # under it. The page runs a click's listeners one after the other in the order registered (a js-only one is done
    # before the next starts), so the clear lands before the export is sent. Not chained by .then: each write stays
    # triggered by its own button, a registered write control (studio.app turns them off for viewers), and API
    # clients call export_file / export_push_hub as before.
    make.click(None, None, [message, file], js="() => ['', null]", api_name="export_file_clear",
               api_visibility="undocumented")
    # The pairs form goes last: a client sending the earlier inputs alone still gets the text form (its default).
    # Progress (and an error's pill, which Gradio leaves on every output it shows progress on) on the line only: on
    # the download box the pill stayed red over an empty box after the error's toast had faded.
    make.click(on_export, [ctx.run, ctx.iteration, kind, fmt, pairs_form], [message, file], api_name="export_file",
               show_progress_on=message)
    push.click(None, None, message, js="() => ''", api_name="export_push_hub_clear", api_visibility="undocumented")
    push.click(on_push, [ctx.run, ctx.iteration, kind, repo, pairs_form], message, api_name="export_push_hub")
