"""A new run's config cautions (``engine.preflight``: it runs, but likely not as meant) reach the page, not only the
server's stderr: *Validate*, *Create run*, *Start a new run* (and its line once the job has ended) and the first-visit
welcome show each under a warning, naming its field, every time; a config without cautions adds nothing.

The caution provoked: a tiny Llama built from a config (``tests.test_preflight.build``) whose tokenizer carries a
ChatML template of its own, as the planner, with ``planner.chat_template = "lumos"`` (the default). Handlers are called
directly, the Gradio wiring through the built app's endpoints; no job runs a real loop.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from engine.config import load_config
from engine.store import Store
from studio.new_run_config import CAUTION_HEAD, cautions_markdown, check_config, config_toml, create_run_from_text
from studio.run_jobs import RUNNING_NOTE, settled_message
from tests.test_preflight import CHATML, build
from tests.test_studio_followups import rendered

FIELD = 'planner.chat_template = "lumos"'


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    """No caution printed yet in this process (the warn-once set), as in tests/test_preflight.py."""
    from engine import preflight as preflight_module

    monkeypatch.setattr(preflight_module, "_WARNED", set())


@pytest.fixture(scope="module")
def chatml(tmp_path_factory) -> Path:
    """A tiny planner whose tokenizer lays a prompt out in ChatML, as an instruct model's does."""
    model = build(tmp_path_factory.mktemp("models") / "chatml")
    (model / "chat_template.jinja").write_text(CHATML)
    return model


def demo_text(tmp_path: Path, *settings: str) -> str:
    """The demo config as the editor holds it, its runs under ``tmp_path``, with ``settings``."""
    return config_toml(load_config("examples/demo.toml", [f"run.workdir={tmp_path / 'runs'}", *settings]))


def caution_block(message: str) -> str:
    """What follows the message's first paragraph: the cautions, or ``""``."""
    return message.partition("\n\n")[2]


def assert_shows_the_caution(message: str, model: Path) -> None:
    """The message ends with the warning and one bullet, its field in bold, shown as the page's Markdown renders it:
    the model's path and the Lumos layout's ``<|user|>`` as typed (markdown dropped an unescaped one as a tag)."""
    block = caution_block(message)
    assert block.startswith(CAUTION_HEAD + "\n\n- **"), message
    page, visible = rendered(block)
    bold = re.findall(r"<li><strong>(.*?)</strong>: ", page)
    assert page.count("<li>") == 1 and [html.unescape(b) for b in bold] == [FIELD], page
    assert str(model) in visible and 'Set planner.chat_template = "tokenizer"' in visible
    assert "Lumos <|user|>/<|assistant|> layout" in visible and "<em>" not in page


def test_a_caution_shows_as_typed_whatever_markdown_it_holds():
    """Only ``<`` was escaped (as ``&lt;``): a path or a template holding ``*`` or ``_`` rendered emphasis and lost
    its characters. Each caution now goes through ``studio.render.md_escaped``, as the Critic tab's texts do."""
    caution = ('planner.*chat*_template = "lumos": /models/my_*fine*_tuned_ has <|user|> & `code` [x](y) '
               "**not bold** ~~kept~~ a\\b")
    page, visible = rendered(cautions_markdown([caution, "a caution *without* a field"]))
    assert visible.partition("\n\n")[2].strip().splitlines() == [caution, "a caution *without* a field"], visible
    assert re.findall(r"<(?:em|code|a|s|del)\b", page) == [] and page.count("<strong>") == 2, page


def test_create_run_shows_the_cautions_every_time_under_the_created_line(tmp_path, chatml, capsys):
    text = demo_text(tmp_path, f"planner.path={chatml}")
    with Store(tmp_path / "s.duckdb") as store:
        for _ in range(2):  # the second time the server prints nothing: the page still says it
            run_id, message = create_run_from_text(store, text)
            line = message.partition("\n\n")[0]
            tasks = store.count("tasks", run_id)
            assert line == (f"Created run `{run_id}` ({tasks} tasks in its data; each iteration trains on 96, "
                            "evaluation uses 450).")
            assert_shows_the_caution(message, chatml)
        assert len([line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: ")]) == 1
        run_id, message = create_run_from_text(store, demo_text(tmp_path))  # the demo agents: no caution
        assert message == (f"Created run `{run_id}` ({store.count('tasks', run_id)} tasks in its data; each iteration "
                           "trains on 96, evaluation uses 450).")


def test_validate_makes_creates_checks_and_shows_the_cautions_writing_nothing(tmp_path, chatml):
    runs = tmp_path / "runs"
    assert check_config(demo_text(tmp_path)) == "Config is valid."
    shown = check_config(demo_text(tmp_path, f"planner.path={chatml}"))
    assert shown.startswith("Config is valid.\n\n")
    assert_shows_the_caution(shown, chatml)
    # What only Create run used to find: a model directory that is not there, a task file that is not.
    assert check_config(demo_text(tmp_path, f"planner.path={tmp_path / 'gone'}")).startswith(
        f"**planner.path**: {tmp_path / 'gone'}: no such model directory")
    assert "nowhere.jsonl" in check_config(demo_text(tmp_path, f"data.tasks={tmp_path / 'nowhere.jsonl'}"))
    bad_k = demo_text(tmp_path).replace("\nk = 15\n", "\nk = 1\n")
    assert bad_k != demo_text(tmp_path) and check_config(bad_k).startswith("**sample.k, line ")  # field check 1st
    assert not runs.exists()


def test_the_run_tab_buttons_show_the_cautions_and_keep_them_once_the_job_ended(tmp_path, chatml, monkeypatch):
    """*Create run*, *Validate* and *Start a new run* through the app's endpoints; the started job is a stub (the
    message is under test, not the loop), and the line it announced keeps the cautions once it has ended."""
    import studio.tab_run
    from studio.app import build_app
    from studio.jobs import JobWorker

    monkeypatch.setattr(studio.tab_run, "start_first_iteration", lambda store, jobs, run_id, user="", session=None:
                        jobs.submit("start_new", run_id, lambda progress, stop: "done", user=user, session=session))
    text = demo_text(tmp_path, f"planner.path={chatml}")
    with Store(tmp_path / "s.duckdb") as store:
        jobs = JobWorker(store)
        # The whole file system as the workspace: the tiny model and the run directory lie in pytest's tmp dirs.
        demo = build_app(store, "examples/demo.toml", jobs=jobs, workspace="/")
        try:
            fns = {f.api_name: f.fn for f in demo.fns.values() if f.api_name}
            assert_shows_the_caution(fns["run_validate"](text, None)[0], chatml)
            assert_shows_the_caution(fns["run_create"](text, None)[0], chatml)
            started = fns["run_start_new"](text, "", None)[0]
            first, _, _ = started.partition("\n\n")
            assert first.startswith("Created run `") and first.endswith(RUNNING_NOTE), started  # the note, then
            assert_shows_the_caution(started, chatml)  # the cautions
            assert jobs.wait(10)
            ended = settled_message(started, jobs.snapshot())
            assert " The job `start_new` on `" in ended.partition("\n\n")[0] and RUNNING_NOTE not in ended
            assert caution_block(ended) == caution_block(started)
        finally:
            demo.close()


def test_the_first_visit_welcome_shows_the_demo_runs_cautions(tmp_path, chatml, monkeypatch):
    import studio.first_visit
    from studio import run_cautions
    from studio.first_visit import UNFINISHED, start_showcase, welcome
    from studio.jobs import JobWorker

    monkeypatch.setattr(studio.first_visit, "run_loop", lambda *args, **kwargs: "stopped")  # the page, not the loop
    run_cautions.forget_all()  # kept from no other test
    config = tmp_path / "studio.toml"
    config.write_text(demo_text(tmp_path, f"planner.path={chatml}"))
    with Store(tmp_path / "s.duckdb") as store:
        jobs = JobWorker(store)
        run_id = start_showcase(store, jobs, str(config), spaces=False)
        assert run_id and jobs.wait(10)
        text, settled = welcome(store, jobs, run_id)
    assert not settled and text.startswith(UNFINISHED.format(run_id=run_id) + "\n\n")
    assert_shows_the_caution(text, chatml)


def test_validate_in_a_read_only_studio_checks_the_fields_only(tmp_path, chatml):
    """Who cannot create a run (``--read-only``, a viewer) gets *Validate*'s field checks and no model checks: those
    may fetch a hub id's config over the network and hold a worker for seconds, for a run this user cannot make."""
    from types import SimpleNamespace

    from studio.app import build_app

    with Store(tmp_path / "s.duckdb") as store:
        for read_only, viewer in ((True, None), (False, "vera")):
            demo = build_app(store, "examples/demo.toml", read_only=read_only, workspace="/",
                             viewers=frozenset({"vera"}))
            try:
                validate = {f.api_name: f.fn for f in demo.fns.values() if f.api_name}["run_validate"]
                request = SimpleNamespace(username=viewer)
                gone = demo_text(tmp_path, f"planner.path={tmp_path / 'gone'}")
                assert validate(gone, request)[0].startswith("Config is valid (fields;")  # the model not looked at
                assert CAUTION_HEAD not in validate(demo_text(tmp_path, f"planner.path={chatml}"), request)[0]
                bad_k = demo_text(tmp_path).replace("\nk = 15\n", "\nk = 1\n")
                assert validate(bad_k, request)[0].startswith("**sample.k, line ")  # the field checks still run
            finally:
                demo.close()


def test_the_picked_runs_cautions_are_shown_again_after_the_message_is_gone(tmp_path, chatml, monkeypatch):
    """A page reload (or another job's line) replaces the message that listed a created run's cautions: the box under
    it shows the picked run's, headed by its id; not while the message above already lists them, and nothing for a
    run without cautions or no run."""
    import gradio as gr

    import engine.loop
    from studio.app import build_app
    from studio.jobs import JobWorker
    from studio.tab_run import picked_run_cautions

    with Store(tmp_path / "s.duckdb") as store:
        run_id, created = create_run_from_text(store, demo_text(tmp_path, f"planner.path={chatml}"))
        plain_id, _ = create_run_from_text(store, demo_text(tmp_path))
        shown = picked_run_cautions(store, run_id)
        assert shown.startswith(f"Run `{run_id}`:\n\n") and caution_block(shown) == caution_block(created)
        assert picked_run_cautions(store, run_id, created) == ""  # the message lists them already
        assert picked_run_cautions(store, run_id, "Started `next_stage` on `other`: ...") == shown
        assert picked_run_cautions(store, plain_id) == "" and picked_run_cautions(store, None) == ""
        demo = build_app(store, "examples/demo.toml", jobs=JobWorker(store), workspace="/")
        try:
            refresh = {f.api_name: f.fn for f in demo.fns.values() if f.api_name}["run_refresh"]
            *_, box, _message, drawn = refresh(run_id, None, "")  # a reloaded page's first refresh
            assert box == shown
            assert refresh(run_id, drawn, "")[-3] == gr.skip()  # the next tick: unchanged, not sent again
            assert refresh(plain_id, drawn, "")[-3] == ""  # another run picked: its own (none)
            # A job raised run.iterations (the config changed): the box is drawn again, from the new config.
            planned = store.get_run(run_id)["config"]["run"]["iterations"]
            engine.loop.set_iterations(store, run_id, planned + 1)
            assert refresh(run_id, drawn, "")[-3] == shown
            # An unexpected failure of the check leaves the box empty, never the rest of the refresh undrawn.
            monkeypatch.setattr(engine.loop, "preflight", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("x")))
            engine.loop.set_iterations(store, run_id, planned + 2)  # a new config: not cached
            *parts, box, _message, _ = refresh(run_id, None, "")
            assert box == "" and "<" in parts[0]  # the pipeline drawn all the same
        finally:
            demo.close()


def test_a_run_the_studio_created_is_not_checked_again_by_its_first_refresh_or_the_welcome(tmp_path, chatml,
                                                                                          monkeypatch):
    """*Create run*, *Start a new run* and the first-visit demo compute the new run's cautions once: the Run tab's box
    (a reload's first refresh, the message gone) and the welcome read them from the one cache they share
    (``studio.run_cautions``), seeded at creation, not from a second preflight (about a second each)."""
    import engine.loop
    import studio.first_visit
    import studio.tab_run
    from studio import run_cautions
    from studio.app import build_app
    from studio.first_visit import start_showcase, welcome
    from studio.jobs import JobWorker

    calls: list[str] = []
    real_preflight = engine.loop.preflight
    monkeypatch.setattr(engine.loop, "preflight", lambda config, *a, **k: calls.append(config.run.name)
                        or real_preflight(config, *a, **k))
    monkeypatch.setattr(studio.tab_run, "start_first_iteration", lambda store, jobs, run_id, user="", session=None:
                        jobs.submit("start_new", run_id, lambda progress, stop: "done", user=user, session=session))
    monkeypatch.setattr(studio.first_visit, "run_loop", lambda *args, **kwargs: "stopped")  # the page, not the loop
    text = demo_text(tmp_path, f"planner.path={chatml}")
    with Store(tmp_path / "s.duckdb") as store:
        jobs = JobWorker(store)
        demo = build_app(store, "examples/demo.toml", jobs=jobs, workspace="/")
        try:
            fns = {f.api_name: f.fn for f in demo.fns.values() if f.api_name}
            for endpoint, args in (("run_create", (text, None)), ("run_start_new", (text, "", None))):
                calls.clear()
                run_id = fns[endpoint](*args)[1]["value"]
                assert jobs.wait(10)
                *_, box, _message, _drawn = fns["run_refresh"](run_id, None, "")
                assert box.startswith(f"Run `{run_id}`:") and CAUTION_HEAD in box
                assert len(calls) == 1, (endpoint, calls)  # the creation's own check, none after it
        finally:
            demo.close()
    config = tmp_path / "studio.toml"
    config.write_text(text)
    with Store(tmp_path / "first.duckdb") as store:  # the demo starts only in an empty store
        jobs = JobWorker(store)
        calls.clear()
        run_id = start_showcase(store, jobs, str(config), spaces=False)
        assert run_id and jobs.wait(10)
        for _ in range(2):  # the welcome is asked every 2 s
            assert_shows_the_caution(welcome(store, jobs, run_id)[0], chatml)
        assert studio.tab_run.picked_run_cautions(store, run_id).startswith(f"Run `{run_id}`:")
        assert len(calls) == 1, calls
        run_cautions.forget_all()  # the cache lost it (another 64 runs since): the welcome reads through it again
        assert_shows_the_caution(welcome(store, jobs, run_id)[0], chatml)
        assert len(calls) == 2 and studio.tab_run.picked_run_cautions(store, run_id) and len(calls) == 2
