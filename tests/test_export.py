"""Export: curated pairs and SFT records in JSONL and Parquet load with ``datasets`` and match the store."""

from __future__ import annotations

import argparse
import unittest.mock

import datasets
import pytest

from engine import curation, verdict_curation
from engine.commands import export as export_command
from engine.export import export_pairs, export_sft
from engine.prompts import grounder_messages, planner_user
from engine.store import Store
from tests._store_world import IT, PLAN_TEXTS, RUN, TASKS, add_iterative_step, build_world, prompt_of, world_store

LOADER = {"jsonl": "json", "parquet": "parquet"}


def main(argv: list[str]) -> int:
    """Run the ``export`` command alone (the full CLI imports every command module, some owned elsewhere)."""
    parser = argparse.ArgumentParser()
    export_command.add_arguments(parser)
    return export_command.run(parser.parse_args(argv[1:]))


@pytest.fixture
def store(tmp_path):
    yield from world_store(tmp_path)


def load(path, fmt, tmp_path) -> list[dict]:
    ds = datasets.load_dataset(LOADER[fmt], data_files=str(path), split="train", cache_dir=str(tmp_path / "hf"))
    return ds.to_list()


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_export_pairs_loads_and_matches(store, tmp_path, fmt):
    curation.exclude_pair(store, RUN, IT, "m2", 0)
    curation.swap_pair(store, RUN, IT, "q1", 0)
    path = tmp_path / "out" / f"pairs.{fmt}"
    assert export_pairs(store, RUN, IT, path, fmt) == 2
    rows = load(path, fmt, tmp_path)
    by_id = {t.id: t for t in TASKS}
    assert [r["task_id"] for r in rows] == ["m1", "q1"]
    assert rows[0] == {
        "prompt": prompt_of(by_id["m1"]),
        "chosen": "Subgoal 1: Multiply 3 by 4.; Subgoal 2: Add 5.",
        "rejected": "Subgoal 1: Guess.",
        "chosen_logppl": 0.5,
        "rejected_logppl": 2.0,
        "task_id": "m1",
        "step": 0,
    }
    assert (rows[1]["chosen"], rows[1]["chosen_logppl"]) == ("Subgoal 1: Ask someone.", 0.9)  # swapped
    assert not list(path.parent.glob("*.tmp"))  # the temp file was renamed away


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_export_sft_loads_and_matches(store, tmp_path, fmt):
    verdict_curation.edit_correction(store, RUN, IT, "q1", 0, 0,
                                     "R1 = KnowledgeQuery(Ada Lovelace); R2 = QA([R1], born?)")
    path = tmp_path / f"sft.{fmt}"
    assert export_sft(store, RUN, IT, path, fmt) == 3
    rows = load(path, fmt, tmp_path)
    by_id = {t.id: t for t in TASKS}
    assert [r["task_id"] for r in rows] == ["m1", "m2", "q1"]
    assert rows[0]["messages"] == grounder_messages(
        by_id["m1"], ["Multiply 3 by 4.", "Add 5."], ["R1 = Calculator(3*4); R2 = Calculator(R1+5)"]
    )
    assert rows[1]["messages"][-1] == {"role": "assistant", "content": "R1 = Calculator(10-4); R2 = Calculator(R1*2)"}
    assert "Subgoal 2: Double it." in rows[1]["messages"][0]["content"]  # the critic's corrected subgoals
    assert rows[2]["messages"][-1]["content"] == "R1 = KnowledgeQuery(Ada Lovelace); R2 = QA([R1], born?)"


def test_an_iterative_step_exports_in_the_layout_it_trained_on(store, tmp_path):
    """A step >= 1 record carries the gold history before it (its R1 is defined), as train_grounder renders it."""
    from engine.outcome import gold_step_results
    from engine.turns import grounding_messages

    add_iterative_step(store, 2)
    path = tmp_path / "sft.jsonl"
    assert export_sft(store, RUN, IT, path) == 3  # q1's verdict is unfixable: no record
    rows = load(path, "jsonl", tmp_path)
    assert [(r["task_id"], r["step"], r["k"]) for r in rows] == [("m1", 0, 0), ("m1", 2, 0), ("m2", 0, 0)]
    task = TASKS[0]
    assert rows[1]["messages"] == grounding_messages(task, 2, [task.gold_subgoals[1]], gold_step_results(task),
                                                     "R2 = Calculator(R1+5)")
    text = " ".join(m["content"] for m in rows[1]["messages"])
    assert "R1 = Calculator(3*4)" in text and rows[1]["messages"][-1]["content"] == "R2 = Calculator(R1+5)"


def test_the_export_line_says_what_curation_left_out(store, tmp_path, capsys):
    """"Exported 92 pairs rows" out of 93 left the reader to guess which one was missing and why."""
    from engine.export import left_out

    assert left_out(store, RUN, IT, "pairs") == "" and left_out(store, RUN, IT, "rollouts") == ""
    assert left_out(store, RUN, IT, "sft") == "1 verdict(s) with no record (unfixable, or dropped by a curator)"
    curation.tie_pair(store, RUN, IT, "m1", 0)
    curation.exclude_pair(store, RUN, IT, "m2", 0)
    curation.tie_pair(store, RUN, IT, "q1", 0)
    assert left_out(store, RUN, IT, "pairs") == "2 tied, 1 excluded"
    db = store.path
    store.close()
    out = tmp_path / "p.jsonl"
    assert main(["export", "--db", str(db), "--run", RUN, "--iteration", str(IT), "--what", "pairs", "--out",
                 str(out)]) == 0
    assert capsys.readouterr().out.endswith("; left out: 2 tied, 1 excluded\n")


def test_bad_format_and_overwrite(store, tmp_path):
    with pytest.raises(ValueError, match="format"):
        export_pairs(store, RUN, IT, tmp_path / "x.csv", "csv")
    path = tmp_path / "p.jsonl"
    path.write_text("old\n")
    assert export_pairs(store, RUN, IT, path) == 3
    assert "old" not in path.read_text() and len(path.read_text().splitlines()) == 3


def test_export_cli(tmp_path, capsys):
    db = tmp_path / "ws.duckdb"
    with Store(db) as s:
        build_world(s)
    out = tmp_path / "sft.parquet"
    argv = ["export", "--db", str(db), "--run", RUN, "--iteration", "0", "--what", "sft", "--format", "parquet"]
    assert main([*argv, "--out", str(out), "--json"]) == 0
    assert '"rows": 2' in capsys.readouterr().out
    assert len(load(out, "parquet", tmp_path)) == 2
    assert (
        main(
            [
                "export",
                "--db",
                str(db),
                "--run",
                "nope",
                "--iteration",
                "0",
                "--what",
                "pairs",
                "--out",
                str(tmp_path / "x.jsonl"),
            ]
        )
        == 2
    )
    assert "no run 'nope'" in capsys.readouterr().err


# -- the conversational form of the pairs (TRL's "prompt/chosen/rejected as message lists") ---------------------------

@pytest.fixture(scope="module")
def tiny_tokenizer():
    """The demo agents' tokenizer, trained in memory on a few lines (milliseconds): its chat template is the lumos
    layout as Jinja (``engine.demo.tokenizer.LUMOS_CHAT_TEMPLATE``), as the tiny test agents' is."""
    from engine.demo.tokenizer import train_tokenizer

    return train_tokenizer([t.question for t in TASKS] * 5 + [" ".join(PLAN_TEXTS["m1"])] * 5, vocab_size=300)


@pytest.fixture(scope="module")
def tokenizer_dir(tiny_tokenizer, tmp_path_factory):
    """``tiny_tokenizer`` saved as the run's planner checkpoint holds it (the export loads it from ``planner.path``
    to render the prompts it checks)."""
    path = tmp_path_factory.mktemp("planner")
    tiny_tokenizer.save_pretrained(path)
    return path


def add_iterative_pair(store: Store, tokenizer, planner_path, chat_template: str = "tokenizer") -> str:
    """Step 2 of m1 as an iterative run with ``planner.chat_template = "tokenizer"`` samples and pairs it: two
    candidate next turns after the gold history, each stored with the prompt ``turns.planner_prompt_iterative``
    renders (the sample stage's layout) through ``tokenizer``'s template. The run's config then says
    ``planner.path = planner_path`` (where ``tokenizer`` is saved) and ``planner.chat_template = chat_template``
    (another value makes a run whose stored prompts are not in its configured layout). Returns that prompt."""
    from engine.outcome import gold_step_results
    from engine.turns import Agent, planner_prompt_iterative

    task, step = TASKS[0], 2
    prompt = planner_prompt_iterative(Agent(None, tokenizer, "tokenizer"), task, task.gold_subgoals[:step - 1],
                                      gold_step_results(task)[:step - 1])
    texts = ["No, I will keep planning. Subgoal 2: Add 5.", "No, I will keep planning. Subgoal 2: Add 4."]
    key = dict(run_id=RUN, iteration=IT, task_id=task.id, step=step)
    store.write_batch([
        ("plans", [{**key, "k": k, "prompt": prompt, "text": text, "subgoals_json": [text.split(": ", 1)[1]],
                    "well_formed": True} for k, text in enumerate(texts)]),
        ("scores", [{**key, "k": k, "logppl": lp, "ppl": 2.718**lp, "n_tokens": 8} for k, lp in ((0, 0.3), (1, 1.3))]),
        ("pairs", [{**key, "pair_idx": 0, "chosen_k": 0, "rejected_k": 1, "chosen_logppl": 0.3,
                    "rejected_logppl": 1.3, "margin": 1.0, "rule": "best_worst"}]),
    ])
    store.set_run_config(RUN, {"planner": {"chat_template": chat_template, "path": str(planner_path)}})
    return prompt


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_conversational_pairs_load_and_trl_renders_them_as_the_text_form(store, tmp_path, tiny_tokenizer,
                                                                           tokenizer_dir, fmt):
    """What DPOTrainer does with a conversational row (trl.data_utils.maybe_apply_chat_template through the
    tokenizer's template) gives the very prompt the text form carries, onetime and iterative alike, and the plans
    with the EOS DPOTrainer appends to text completions."""
    from trl.data_utils import is_conversational, maybe_apply_chat_template

    iterative_prompt = add_iterative_pair(store, tiny_tokenizer, tokenizer_dir)
    text_path, messages_path = tmp_path / f"text.{fmt}", tmp_path / f"messages.{fmt}"
    assert export_pairs(store, RUN, IT, text_path, fmt) == export_pairs(store, RUN, IT, messages_path, fmt,
                                                                         form="messages") == 4
    text_rows, message_rows = load(text_path, fmt, tmp_path), load(messages_path, fmt, tmp_path)
    assert [(r["task_id"], r["step"]) for r in message_rows] == [("m1", 0), ("m1", 2), ("m2", 0), ("q1", 0)]
    assert text_rows[1]["prompt"] == iterative_prompt
    m1 = TASKS[0]
    assert message_rows[0]["prompt"] == [{"role": "user", "content": planner_user(m1.question)}]
    assert [m["role"] for m in message_rows[1]["prompt"]] == ["user", "assistant", "user"]  # the gold step 1 before
    assert message_rows[1]["prompt"][1]["content"] == "Subgoal 1: Multiply 3 by 4."
    for text, messages in zip(text_rows, message_rows, strict=True):
        assert is_conversational(messages) and not is_conversational(text)
        assert messages["chosen"] == [{"role": "assistant", "content": text["chosen"]}]
        assert messages["rejected"] == [{"role": "assistant", "content": text["rejected"]}]
        assert {k: v for k, v in messages.items() if k not in ("prompt", "chosen", "rejected")} == \
            {k: v for k, v in text.items() if k not in ("prompt", "chosen", "rejected")}
        rendered = maybe_apply_chat_template(messages, tiny_tokenizer)
        eos = tiny_tokenizer.eos_token
        assert rendered == {"prompt": text["prompt"], "chosen": text["chosen"] + eos,
                            "rejected": text["rejected"] + eos}


def test_conversational_prompts_are_built_by_the_sample_stages_function(store, tmp_path):
    """No second copy of the prompt layout: the exported chat is ``turns.planner_step_messages``, which the lumos
    layout renders into the stored prompt byte for byte."""
    from engine.export import pair_rows
    from engine.prompts import render_chat
    from engine.turns import planner_step_messages

    text_rows, message_rows = pair_rows(store, RUN, IT), pair_rows(store, RUN, IT, "messages")
    by_id = {t.id: t for t in TASKS}
    for text, messages in zip(text_rows, message_rows, strict=True):
        assert messages["prompt"] == planner_step_messages(by_id[text["task_id"]], text["step"], [])
        assert render_chat(messages["prompt"], add_generation_prompt=True) == text["prompt"]
    with pytest.raises(ValueError, match="pairs form"):
        pair_rows(store, RUN, IT, "chat")


def test_export_cli_pairs_form(store, tmp_path, tiny_tokenizer, tokenizer_dir, capsys):
    """``--pairs-form messages`` writes the conversational rows and says so; a lumos-layout run gets a note that TRL
    renders with the tokenizer's template instead, a tokenizer-template run none; the flag with sft is refused."""
    db = store.path
    argv = ["export", "--db", str(db), "--run", RUN, "--iteration", str(IT), "--what", "pairs"]
    store.close()
    out = tmp_path / "p.parquet"
    assert main([*argv, "--pairs-form", "messages", "--out", str(out), "--json"]) == 0
    captured = capsys.readouterr()
    assert '"pairs_form": "messages"' in captured.out and 'planner.chat_template = "lumos"' in captured.err
    assert main([*argv, "--out", str(tmp_path / "t.jsonl")]) == 0  # the default: text, as before
    captured = capsys.readouterr()
    assert captured.out.startswith("wrote 3 pairs rows to ") and "(jsonl, text form)" in captured.out
    assert captured.err == ""
    assert load(out, "parquet", tmp_path)[0]["chosen"][0]["role"] == "assistant"
    assert isinstance(load(tmp_path / "t.jsonl", "jsonl", tmp_path)[0]["prompt"], str)
    capsys.readouterr()  # datasets' progress lines
    with Store(db) as s:
        add_iterative_pair(s, tiny_tokenizer, tokenizer_dir)  # the run's planner now renders with its template
    assert main([*argv, "--pairs-form", "messages", "--out", str(tmp_path / "m.jsonl")]) == 0
    assert capsys.readouterr().err == ""
    sft = ["export", "--db", str(db), "--run", RUN, "--iteration", str(IT), "--what", "sft", "--pairs-form", "text"]
    assert main([*sft, "--out", str(tmp_path / "s.jsonl")]) == 2
    assert "--pairs-form applies to --what pairs only" in capsys.readouterr().err
    assert not (tmp_path / "s.jsonl").exists()


# -- the messages are checked against the prompts the planner was sampled from ------------------------------------

def export_messages(db, out) -> int:
    return main(["export", "--db", str(db), "--run", RUN, "--iteration", str(IT), "--what", "pairs", "--pairs-form",
                 "messages", "--out", str(out)])


def test_conversational_pairs_of_a_normal_run_pass_the_prompt_check(store, tmp_path, tiny_tokenizer, tokenizer_dir,
                                                                    capsys):
    """Every rebuilt chat renders, as the run rendered it, to its stored prompt: onetime pairs in the lumos layout
    (no tokenizer needed) and an iterative pair through the tokenizer's template loaded from ``planner.path``."""
    from engine.export import pair_rows

    assert len(pair_rows(store, RUN, IT, "messages")) == 3  # the lumos layout, the default config
    add_iterative_pair(store, tiny_tokenizer, tokenizer_dir)
    assert len(pair_rows(store, RUN, IT, "messages")) == 4
    db = store.path
    store.close()
    assert export_messages(db, tmp_path / "m.jsonl") == 0
    assert capsys.readouterr().err == ""
    assert len((tmp_path / "m.jsonl").read_text().splitlines()) == 4


@pytest.mark.slow
@pytest.mark.parametrize("template", ["lumos", "tokenizer"])
def test_the_prompts_a_real_iterative_run_sampled_pass_the_check(tiny_run, tmp_path, template, capsys):
    """The sample stage's own prompts (tiny agents, iterative steps after the gold history) are what the check
    rebuilds, in either layout: the lumos one reads the tokenizer's EOS after each gold step, loaded from the
    checkpoint the stage sampled with."""
    db, run_id = tiny_run("sample.formulation=iterative", "pairs.min_gap=0.0", f"planner.chat_template={template}",
                          stages=("sample", "score", "pairs"))
    out = tmp_path / "m.jsonl"
    assert main(["export", "--db", str(db), "--run", run_id, "--iteration", "1", "--what", "pairs", "--pairs-form",
                 "messages", "--out", str(out), "--json"]) == 0, capsys.readouterr().err
    rows = load(out, "jsonl", tmp_path)
    assert rows and any(r["step"] >= 2 for r in rows)  # a prompt with an assistant turn (a gold step) in it


def test_a_stored_prompt_the_messages_do_not_render_to_refuses_the_export(store, tmp_path, capsys):
    """A prompt the planner was sampled from that today's code does not rebuild (tampered here, as older code or
    another layout would have left it) refuses the whole messages export: exit 2, the count, the first differing
    pair and where it parts, and no file, not even a temp one; the text form still writes the stored prompts."""
    import duckdb

    from engine.export import PromptMismatch, pair_rows
    from studio import tab_export

    stored = prompt_of(TASKS[1])
    db = store.path
    store.close()
    con = duckdb.connect(str(db))
    con.execute("UPDATE plans SET prompt = replace(prompt, '<|assistant|>', '<|assistant|> ') WHERE task_id = 'm2'")
    con.close()
    out = tmp_path / "out" / "m.jsonl"
    out.parent.mkdir()
    assert export_messages(db, out) == 2
    err = capsys.readouterr().err
    at = stored.index("<|assistant|>") + len("<|assistant|>")
    assert err.startswith(f"error: --pairs-form messages: run {RUN!r} iteration {IT}: 1 of 3 pairs' planner prompts")
    assert f"first: task 'm2', step 0, iteration {IT}, from character {at} (stored ' \\n', rebuilt '\\n')" in err
    assert 'planner.chat_template = "lumos"' in err and err.rstrip().endswith("; nothing written")
    assert list(out.parent.iterdir()) == []
    with Store(db) as s:
        with pytest.raises(PromptMismatch, match="1 of 3 pairs"):  # the studio's Export tab refuses it too
            tab_export.export_file(s, RUN, IT, "pairs", "jsonl", out.parent, "messages")
        assert list(out.parent.iterdir()) == []
        tampered = {r["task_id"]: r["prompt"] for r in pair_rows(s, RUN, IT)}["m2"]  # the text form: as stored
        assert tampered == stored.replace("<|assistant|>", "<|assistant|> ")
    assert main(["export", "--db", str(db), "--run", RUN, "--iteration", str(IT), "--what", "pairs", "--out",
                 str(out)]) == 0


def test_prompts_sampled_in_another_layout_than_the_config_says_are_refused(store, tmp_path, tiny_tokenizer,
                                                                            tokenizer_dir, capsys):
    """An iterative pair sampled through the tokenizer's template in a run whose config says the lumos layout: the
    demo template ends an assistant turn without the lumos layout's newline, so the messages would be rendered into
    another prompt than the planner saw. A tokenizer that is gone cannot check them, and says so."""
    add_iterative_pair(store, tiny_tokenizer, tokenizer_dir, chat_template="lumos")
    db = store.path
    store.close()
    assert export_messages(db, tmp_path / "m.jsonl") == 2
    err = capsys.readouterr().err
    assert "1 of 4 pairs' planner prompts" in err and "first: task 'm1', step 2, iteration 0" in err
    assert not (tmp_path / "m.jsonl").exists()
    with Store(db) as s:
        s.set_run_config(RUN, {"planner": {"chat_template": "tokenizer", "path": str(tmp_path / "gone")}})
    assert export_messages(db, tmp_path / "m.jsonl") == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --pairs-form messages: planner.path: {tmp_path / 'gone'}: the tokenizer the "
                          "sample stage of iteration 0 rendered its prompts with does not load")
    assert not (tmp_path / "m.jsonl").exists()


def test_the_chat_template_note_reads_the_iterations_template_as_the_check_does(store, monkeypatch):
    """The lumos-layout note reads the config the prompt check renders with: the iteration's, its curriculum phase
    applied, not the run-level section. No phase may set ``planner`` today (``config_checks.SETTABLE_SECTIONS``);
    with that lifted, a phase switching to the tokenizer's template at iteration 2 leaves the note on iterations 0
    and 1 (the lumos layout) and takes it off iteration 2, in the CLI's note and the Export tab's caution alike."""
    from engine import config_checks
    from engine.export import chat_template_note
    from studio import tab_export

    monkeypatch.setattr(config_checks, "SETTABLE_SECTIONS", (*config_checks.SETTABLE_SECTIONS, "planner"))
    store.set_run_config(RUN, {"schedule": {"phases": [
        {"name": "lumos", "iterations": 1},
        {"name": "chat", "iterations": 1, "set": ["planner.chat_template=tokenizer"]}]}})
    for iteration, noted in ((0, True), (1, True), (2, False)):
        assert ("lumos layout" in chat_template_note(store, RUN, iteration)) is noted, iteration
        assert bool(tab_export.form_caution(store, RUN, iteration, "pairs", "messages")) is noted, iteration


def test_the_export_parser_offers_the_engines_names_without_loading_the_writers():
    """``--format``/``--pairs-form`` offer ``engine.export_forms``' tuples, the very ones the writers check, and
    building the parser (every ``--help``) loads neither ``engine.export`` (pyarrow) nor the training stack: the
    parser once kept a copy of ``PAIRS_FORMS`` for that, which a new form would have left behind."""
    import subprocess
    import sys

    from engine import export, export_forms

    probe = ("import argparse, sys; from engine.commands import export; "
             "export.add_arguments(argparse.ArgumentParser()); "
             "print(sorted(m for m in ('engine.export', 'pyarrow', 'torch', 'transformers', 'trl') "
             "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
    parser = argparse.ArgumentParser()
    export_command.add_arguments(parser)
    choices = {a.dest: a.choices for a in parser._actions}
    assert choices["pairs_form"] is export_forms.PAIRS_FORMS is export.PAIRS_FORMS
    assert choices["format"] is export_forms.FORMATS is export.FORMATS


def test_export_tab_offers_the_pairs_form_for_download_and_push(store, tmp_path):
    """The Export tab writes the form picked under its own name, so the text download is never replaced; the Hub
    push exports the same form; SFT records ignore it."""
    from studio import tab_export

    text_path, _ = tab_export.export_file(store, RUN, IT, "pairs", "jsonl", tmp_path)
    path, rows = tab_export.export_file(store, RUN, IT, "pairs", "jsonl", tmp_path, "messages")
    assert (text_path.name, path.name, rows) == (f"{RUN}-it0-pairs.jsonl", f"{RUN}-it0-pairs-messages.jsonl", 3)
    assert load(path, "jsonl", tmp_path)[0]["prompt"][0]["role"] == "user"
    assert isinstance(load(text_path, "jsonl", tmp_path)[0]["prompt"], str)
    sft_path, _ = tab_export.export_file(store, RUN, IT, "sft", "jsonl", tmp_path, "messages")
    assert sft_path.name == f"{RUN}-it0-sft.jsonl"
    assert "lumos layout" in tab_export.form_caution(store, RUN, IT, "pairs", "messages")
    assert tab_export.form_caution(store, RUN, IT, "pairs", "text") == ""
    with pytest.raises(ValueError, match="pairs form"):
        tab_export.export_file(store, RUN, IT, "pairs", "jsonl", tmp_path, "../x")

    pushed: list[tuple[datasets.Dataset, dict]] = []
    with unittest.mock.patch.object(datasets.Dataset, "push_to_hub", lambda ds, *a, **k: pushed.append((ds, k))):
        said = tab_export.push_to_hub(store, RUN, IT, "pairs", "me/data", "hf_token", "messages")  # no network
        tab_export.push_to_hub(store, RUN, IT, "pairs", "me/data", "hf_token", "text")
        said_sft = tab_export.push_to_hub(store, RUN, IT, "sft", "me/data", "hf_token", "messages")
    assert said_sft.startswith("Pushed ") and " SFT records to https://huggingface.co/datasets/me/data " in said_sft
    assert said.startswith("Pushed 3 pairs (messages form) to https://huggingface.co/datasets/me/data "
                           "(config pairs_messages, split iteration_0)")
    assert pushed[0][0].to_list()[0]["chosen"][0]["role"] == "assistant"
    # one config per schema: neither replaces another's split of the same iteration, nor mixes features with it
    assert [(k["config_name"], k["split"]) for _, k in pushed] == [
        ("pairs_messages", "iteration_0"), ("pairs", "iteration_0"), ("sft", "iteration_0")]
