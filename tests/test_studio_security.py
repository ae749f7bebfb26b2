"""Nobody gets in where they don't belong: the studio served for real (``studio.auth.serve``) on free ports, probed
over HTTP with httpx and ``gradio_client``.

Three servers, one per module: A with ``--auth`` (curator ``ann``, viewer ``vera``) on a store whose critique ran
through the openai backend with a fake key in the environment; B ``--read-only``; C in Spaces mode. Every route of
the FastAPI app and every API endpoint of the Blocks app is enumerated from the live objects, so a new route or
endpoint fails here until it is classified.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import re
import shutil
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

SECRET = "sk-test-SECRET-123"
KEY_ENV = "MOAT_TEST_SECRET_KEY"
EDIT = "R1 = Calculator(1+1)"
PAYLOADS = ("' OR 1=1 --", '"; DROP TABLE pairs; --', "%", "_", "\\", "\\%", "a\\_b", "'; DELETE FROM tasks; --",
            "é", "日本語", "Ω≈ç√", "\x00", "$text", "?", "%' OR '1'='1")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _snapshot(store) -> dict[str, str]:
    """A digest of every table's full content (order-independent)."""
    from engine.dbutil import TABLES

    out = {}
    for table in TABLES:
        df = store.query(f'SELECT * FROM "{table}"')  # table names from the schema, not from a user
        rows = sorted(json.dumps(r, default=str, sort_keys=True) for r in df.to_dict("records"))
        out[table] = f"{len(rows)}:{hashlib.sha256(''.join(rows).encode()).hexdigest()}"
    return out


# -- a local OpenAI-compatible critic that echoes the Authorization header back ---------------------------------

class _Critic(BaseHTTPRequestHandler):
    calls = 0

    def do_POST(self):  # noqa: N802 (http.server's naming)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        auth = self.headers.get("Authorization", "")
        type(self).calls += 1
        if type(self).calls == 1:  # one 500 first, so the retry is logged (with the echoed key in the error body)
            data, status = {"error": {"message": f"boom, you sent {auth}", "type": "test"}}, 500
        else:
            content = f"Final answer reached. (echo: {auth})"
            data, status = {"id": "x", "object": "chat.completion", "created": 0, "model": body.get("model"),
                            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                         "finish_reason": "stop"}],
                            "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}}, 200
        raw = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args):  # keep the test output clean
        pass


@pytest.fixture(scope="module")
def secret_run(studio_db, tmp_path_factory):
    """A copy of the studio store whose critique ran through the openai backend with ``SECRET`` in the env; every
    log record and stdout/stderr line of it, and the exports made from it: ``(db, run_id, logs, export_dir)``."""
    from engine.__main__ import main
    from engine.export import export_pairs, export_sft
    from engine.loop import run_config, run_stage
    from engine.store import Store

    src, run_id = studio_db
    work = tmp_path_factory.mktemp("secret")
    db = work / "studio.duckdb"
    shutil.copy(src, db)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Critic)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    os.environ[KEY_ENV] = SECRET  # module-scoped: removed again below
    records: list[str] = []

    class Grab(logging.Handler):
        def emit(self, record):
            records.append(self.format(record))

    grab, root = Grab(logging.DEBUG), logging.getLogger()
    old_level = root.level
    root.addHandler(grab)
    root.setLevel(logging.DEBUG)
    out, err = io.StringIO(), io.StringIO()
    exports = work / "exports"
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            with Store(db) as store:
                config = run_config(store, run_id)
                for key, value in (("backend", "openai"), ("base_url", f"http://127.0.0.1:{server.server_port}/v1"),
                                   ("model", "critic-m"), ("api_key_env", KEY_ENV),
                                   ("max_retries", 2)):
                    setattr(config.critic, key, value)
                store.delete("verdicts", run_id, 1)
                assert run_stage(store, run_id, 1, "critique", config=config) == "done"
                assert set(store.frame("verdicts", run_id, 1).backend) == {"openai"}
                export_pairs(store, run_id, 1, exports / "pairs.jsonl")
                export_sft(store, run_id, 1, exports / "sft.parquet", "parquet")
            assert main(["export", "--db", str(db), "--run", run_id, "--iteration", "1", "--what", "sft",
                         "--out", str(exports / "cli-sft.jsonl"), "--json"]) == 0
    finally:
        root.removeHandler(grab)
        root.setLevel(old_level)
        server.shutdown()
    assert _Critic.calls >= 2
    yield db, run_id, records + out.getvalue().splitlines() + err.getvalue().splitlines(), exports
    os.environ.pop(KEY_ENV, None)


@pytest.fixture(scope="module")
def studio_db(tmp_path_factory, tiny_agents_dir, demo_tasks):
    from test_studio_handlers import build_studio_store

    path = tmp_path_factory.mktemp("security_db") / "studio.duckdb"
    return path, build_studio_store(path, tiny_agents_dir, demo_tasks)


def _serve(demo, auth=None) -> str:
    from studio.app import HEAD
    from studio.auth import serve

    port = _free_port()
    serve(demo, port=port, auth=auth, head=HEAD, prevent_thread_lock=True, quiet=True)
    return f"http://127.0.0.1:{port}/"


@pytest.fixture(scope="module")
def server_a(secret_run, tmp_path_factory):
    """``--auth`` with curator ann and viewer vera, on the secret store; workspace = pytest's base temp dir."""
    from engine.store import Store
    from studio.app import build_app

    db, run_id, _, _ = secret_run
    store = Store(db)
    demo = build_app(store, "examples/demo.toml", viewers=frozenset({"vera"}),
                     workspace=tmp_path_factory.getbasetemp())
    url = _serve(demo, auth=[("ann", "pw-ann"), ("vera", "pw-vera")])
    yield url, store, run_id, demo
    demo.moat_jobs.stop()
    demo.moat_jobs.wait(10)
    demo.close()
    store.close()


@pytest.fixture(scope="module")
def server_b(studio_db, tmp_path_factory):
    """``--read-only``: the store opened read-only, no accounts."""
    from engine.store import Store
    from studio.app import build_app

    db = tmp_path_factory.mktemp("readonly") / "studio.duckdb"
    shutil.copy(studio_db[0], db)
    store = Store(db, read_only=True)
    demo = build_app(store, "examples/demo.toml", read_only=True, workspace=tmp_path_factory.getbasetemp())
    url = _serve(demo)
    yield url, store, studio_db[1], demo
    demo.close()
    store.close()


@pytest.fixture(scope="module")
def server_c(studio_db, tmp_path_factory):
    """Spaces mode (workspace = the repo, where the demo agents and tasks live)."""
    from engine.store import Store
    from studio.app import build_app

    db = tmp_path_factory.mktemp("spaces") / "studio.duckdb"
    shutil.copy(studio_db[0], db)
    store = Store(db)
    demo = build_app(store, "examples/demo.toml", spaces=True)
    url = _serve(demo)
    yield url, store, studio_db[1], demo
    demo.moat_jobs.stop()
    demo.moat_jobs.wait(10)
    demo.close()
    store.close()


# -- every route needs a login -----------------------------------------------------------------------------------

def _routes(app) -> list[tuple[str, str]]:
    """``(method, path)`` of every route of the live FastAPI app, included routers flattened."""
    def walk(routes):
        for r in routes:
            if hasattr(r, "effective_candidates"):  # FastAPI's included router
                yield from walk(r.effective_candidates())
            else:
                yield r
    out = []
    for r in walk(app.routes):
        for method in sorted(getattr(r, "methods", None) or {"GET"}):
            out.append((method, r.path))
    return sorted(set(out))


def _concrete(path: str) -> str:
    path = path.replace("{api_name}", "pairs_search")
    return re.sub(r"\{[^}]+\}", "x", path)


def _status(client: httpx.Client, method: str, url: str) -> tuple[int, str]:
    """Status and the start of the body, without waiting for a streaming (SSE) response to end; ``(0, "timeout")``
    for a route still waiting after 3 s (it got past the gate: the gate answers at once)."""
    try:
        with client.stream(method, url, timeout=3, **({"json": {}} if method == "POST" else {})) as r:
            body = b""
            for chunk in r.iter_raw():
                body += chunk
                if len(body) > 2000 or r.headers.get("content-type", "").startswith("text/event-stream"):
                    break
            return r.status_code, body[:2000].decode("utf-8", "replace")
    except httpx.TimeoutException:
        return 0, "timeout"


def _login(url: str, user: str, password: str) -> httpx.Client:
    client = httpx.Client(base_url=url, follow_redirects=False)
    assert client.post("login", data={"username": user, "password": password}).status_code == 200
    return client


def test_auth_gates_every_route(server_a):
    from studio.auth import PUBLIC, is_public

    url, store, run_id, demo = server_a
    routes = _routes(demo.app)
    assert ("POST", "/gradio_api/queue/join") in routes and ("POST", "/gradio_api/upload") in routes
    anon = httpx.Client(base_url=url, follow_redirects=False)
    ann = _login(url, "ann", "pw-ann")
    open_routes = []
    for method, path in routes:
        target = _concrete(path).lstrip("/")
        status, body = _status(anon, method, target)
        if is_public(_concrete(path)):
            open_routes.append(path)
            assert str(store.path) not in body and "Curator name" not in body, path  # no app content leaks
            continue
        assert status in (401, 403) or 300 <= status < 400, (method, path, status, body[:200])
        status, body = _status(ann, method, target)
        if path.startswith("/gradio_api/run-history/"):  # gradio's run history wants a Hugging Face token on top
            assert status in (401, 403, 404, 422) and "Not authenticated" not in body, (path, status, body)
            continue
        assert status != 401 and "Not authenticated" not in body, (method, path, status, body)
    # Every public route is listed with its reason, and the list carries no stale entries.
    assert open_routes and all(any(_concrete(p) == k or (k.endswith("/") and _concrete(p).startswith(k))
                                   for _, p in routes) for k in PUBLIC)
    page = anon.get("").text  # the login page: gradio's login form config, none of the app
    assert '"auth_required":true' in page.replace(" ", "") and "curator-name" not in page
    for path in ("", "config", "gradio_api/info", "gradio_api/openapi.json", "openapi.json"):
        assert ann.get(path).status_code == 200, path
    assert anon.get("config").status_code == 401 and anon.get("gradio_api/info").status_code == 401


def test_file_upload_and_queue_routes_need_the_login(server_a, tmp_path):
    from gradio_client import Client

    url, store, run_id, demo = server_a
    anon = httpx.Client(base_url=url)
    ann = _login(url, "ann", "pw-ann")
    upload = tmp_path / "note.txt"
    upload.write_text("hello")
    assert anon.post("gradio_api/upload", files={"files": upload.open("rb")}).status_code == 401
    uploaded = ann.post("gradio_api/upload", files={"files": upload.open("rb")})
    assert uploaded.status_code == 200
    served = f"gradio_api/file={uploaded.json()[0]}"
    assert anon.get(served).status_code == 401 and ann.get(served).text == "hello"
    join = {"data": [], "fn_index": 0, "session_hash": "abc", "event_data": None, "trigger_id": None}
    assert anon.post("gradio_api/queue/join", json=join).status_code == 401
    assert anon.get("gradio_api/queue/data", params={"session_hash": "abc"}).status_code == 401
    with pytest.raises(ValueError, match="login|auth|401"):
        Client(url, verbose=False)  # no login: the client cannot even read the config
    client = Client(url, auth=("ann", "pw-ann"), verbose=False, download_files=False)
    client.predict(api_name="/studio_load")
    client.predict(run_id, api_name="/studio_pick_run")
    result = client.predict(run_id, 1, "pairs", "jsonl", api_name="/export_file")
    file_url = result[1]["url"]
    assert anon.get(file_url).status_code == 401 and ann.get(file_url).status_code == 200


# -- every write endpoint is refused for viewers and in a read-only studio -------------------------------------

def _keys(store, run_id: str) -> tuple[str, str, str]:
    pair = store.pairs_page(run_id, 1, limit=1).iloc[0]
    verdict = store.verdict_queue(run_id, 1, limit=1).iloc[0]
    return (f"{pair.task_id}|{int(pair.step)}|{int(pair.pair_idx)}",
            f"{verdict.task_id}|{int(verdict.step)}|{int(verdict.k)}", pair.task_id)


def endpoints(run_id: str, pair: str, verdict: str, task: str, toml: str) -> dict[str, tuple[str, tuple | None]]:
    """Every API endpoint of the studio: ``name -> ("read" | "write", args)`` (args None: needs a browser event).
    A new endpoint fails ``test_every_endpoint_is_classified`` until it is added here."""
    pairs_filters = (run_id, 1, "", "", "", "any", "any", "any", "task", 1, None)
    critic_filters = (run_id, 1, "", "any", "task", 1, None)
    # The Pairs reloads read the Search / Min / Max text the last load applied (session state), not the boxes.
    pairs_applied = (run_id, 1, "any", "any", "any", "task", 1, None)
    out: dict[str, tuple[str, tuple | None]] = {
        "studio_load": ("read", ()),
        "studio_pick_run": ("read", (run_id,)),
        "studio_sync_iterations": ("read", (run_id, 1)),  # new iterations of a running run into the picker
        "studio_curator_name": ("read", ("someone",)),  # session state only
        "studio_restore_name": ("read", ("someone",)),  # the name this browser kept: session state only
        # Where this browser was (studio.place): session state only, validated before it is shown.
        "studio_restore_place": ("read", ({"tab": "pairs", "run": "x' OR 1=1 --", "iteration": "1; DROP"},)),
        "studio_place_save": ("read", None),  # runs in the browser only (js): the place into localStorage
        "studio_iteration_picked": ("read", None),  # runs in the browser only (js): the curator's pick is not auto
        "studio_view_key": ("read", None),  # runs in the browser only (js): the run and iteration the page shows
        # The run picker's value copied in the browser only (js) for one event each (studio.relay).
        **{f"{name}_on_run": ("read", None) for name in ("run_refresh", "metrics_runs", "metrics_experiments",
                                                         "metrics_figures")},
        # The view key copied in the browser only (js) for each data tab's load (studio.relay).
        **{f"{name}_on_view": ("read", None) for name in ("plans_search", "pairs_search", "critic_queue")},
        # A typed name copied in the browser only (js) for each queue and lease (studio.common.Ctx.renamed).
        **{f"{name}_on_name": ("read", None) for name in ("pairs_search", "pairs_claim", "critic_queue",
                                                          "critic_claim")},
        **{f"studio_tab_{t}": ("read", None) for t in ("run", "plans", "pairs", "critic", "metrics", "export")},
        # The tab shown (studio.common.Ctx.tab), set in the browser only (js).
        **{f"studio_tab_shown_{t}": ("read", None) for t in ("run", "plans", "pairs", "critic", "metrics", "export")},
        "pairs_filters_save": ("read", None),  # runs in the browser only (js): the filters into localStorage
        "critic_filters_save": ("read", None),
        "pairs_filters_restore": ("read", ({"order": "margin", "text": "x' OR 1=1 --"},)),  # validated, then shown
        "critic_filters_restore": ("read", ({"reviewed": "overruled", "status": "no-such"},)),
        "critic_show_overruled": ("read", ()),  # sets the Reviewed filter
        "critic_page_clamp": ("read", ()),  # a page past the last: the page box moves to the page shown
        "run_validate": ("read", (toml,)),
        "run_cli_command": ("read", (toml,)),
        # Also turns the job's announcement into how it ended (the worker's state only).
        "run_refresh": ("read", (run_id, "")),
        "run_config_from_picked": ("read", (run_id,)),  # the picked run's config into the new-run editor
        "plans_search": ("read", (run_id, 1, "", "", "", 1)),
        "plans_filters": ("read", (run_id, "", "")),  # the domain and split filters' choices for the run
        "plans_select_row": ("read", None),
        "plans_task": ("read", (run_id, 1, task, "")),  # "": the live trigger (studio.live_views) as on load
        "plans_diff": ("read", (run_id, 1, task, None, None)),
        "plans_task_redraw": ("read", (run_id, 1, task, "", None, None)),  # the kept task's plans drawn again
        # The data tabs' live reload (studio.live_views): stage records read again; a tab's trigger, nothing else.
        "live_views_check": ("read", (f"{run_id}\n1", "pairs")),
        "live_views_shown": ("read", (f"{run_id}\n1", "pairs")),
        "live_views_on": ("read", None),  # runs in the browser only (js): the timer on or off
        "pairs_search": ("read", pairs_filters),
        "pairs_select_row": ("read", None),
        "pairs_detail": ("read", (run_id, 1, pair)),
        "pairs_detail_redraw": ("read", (run_id, 1, pair, None)),  # the same key in another iteration: redrawn
        "pairs_evidence": ("read", (run_id, 1, pair)),  # computes with the grounder, stores nothing
        "pairs_claim": ("read", (run_id, 1, pair)),  # the pair's lease, in memory
        "pairs_evidence_clear": ("read", None),  # runs in the browser only (js): no server function
        "pairs_next": ("read", None),  # needs the page's table
        "pairs_prev": ("read", None),
        # The queue read again after j/k (studio.keys.wire_walk); the key walked to is session state.
        "pairs_next_reload": ("read", pairs_applied[:-1]),
        "pairs_prev_reload": ("read", pairs_applied[:-1]),
        "critic_next": ("read", None),
        "critic_claim": ("read", (run_id, 1, verdict)),  # a lease in memory, nothing stored
        "critic_prev": ("read", None),
        "critic_next_reload": ("read", critic_filters[:-1]),
        "critic_prev_reload": ("read", critic_filters[:-1]),
        # The team counters' timer (studio.team_counters): the counts read again, the line this session drew rewritten
        # (and on the Critic tab the agreement, when the verdict log grew: studio.critic_refresh); switched on and off
        # in the browser only (js), by the view key and the tab shown.
        **{f"{tab}_counters": ("read", ()) for tab in ("pairs", "critic")},
        **{f"{tab}_counters_on": ("read", None) for tab in ("pairs", "critic")},
        "pairs_undo": ("write", (run_id, 1)),
        "pairs_undo_reload": ("read", pairs_applied),
        "pairs_undo_detail": ("read", (run_id, 1, pair)),
        "critic_undo": ("write", (run_id, 1)),
        "critic_undo_reload": ("read", critic_filters),
        "critic_undo_detail": ("read", (run_id, 1, verdict)),
        "critic_queue": ("read", critic_filters),
        "pairs_curation": ("read", (run_id,)),
        "critic_select_row": ("read", None),
        "critic_detail": ("read", (run_id, 1, verdict)),
        "critic_detail_redraw": ("read", (run_id, 1, verdict, None)),
        "critic_preview_edit": ("read", (run_id, verdict, EDIT)),  # executes the edit in memory, stores nothing
        "metrics_runs": ("read", (run_id,)),
        "metrics_shown": ("read", None),  # runs in the browser only (js): a new value when the Metrics tab is shown
        "metrics_figures": ("read", (run_id, None)),
        "metrics_experiments": ("read", ("",)),
        "metrics_experiment": ("read", ("",)),  # "": the run view; an experiment's view reads the report
        "metrics_breakdown": ("read", ("", None)),  # one split's per-template table; no experiment: nothing
        "run_create": ("write", (toml,)),
        "run_start_new": ("write", (toml, "")),
        "run_next_stage": ("write", (run_id,)),
        "run_rest_of_iteration": ("write", (run_id,)),
        "run_next_iteration": ("write", (run_id,)),
        "run_stop": ("write", ()),
        "metrics_swap_compute": ("write", (run_id, "")),  # a swap-table job on the worker (evaluates models)
        "metrics_swap_watch": ("read", (run_id,)),  # the tables redrawn once that job has ended
        # After a job button: the Run tab's timer to the busy pace (studio.pace; the worker's state only).
        **{f"run_{kind}_pace": ("read", ()) for kind in ("start_new", "next_stage", "rest_of_iteration",
                                                         "next_iteration")},
        "critic_save_edit": ("write", (run_id, 1, verdict, EDIT, "why")),
        "critic_save_edit_reload": ("read", critic_filters),
        "critic_save_edit_detail": ("read", (run_id, 1, verdict)),
        "export_file": ("write", (run_id, 1, "pairs", "jsonl")),  # writes a file on the server
        "export_push_hub": ("write", (run_id, 1, "pairs", "me/data")),  # writes to the Hub
        # Before each: the message and the download cleared in the browser only (js), so a refusal leaves neither.
        "export_file_clear": ("read", None),
        "export_push_hub_clear": ("read", None),
        "export_kind": ("read", ("sft",)),  # the pairs-form radio off for SFT records
        # Key c while Accept correction is off: why, in an info toast (studio.keys.wire_why)
        "critic_accept_correction_why": ("read", (run_id, 1, verdict)),
    }
    for action in ("swap", "exclude", "tie", "restore", "choose", "reviewed"):
        out[f"pairs_{action}"] = ("write", (run_id, 1, pair, 0, 1, "why"))
        out[f"pairs_{action}_reload"] = ("read", pairs_applied)
        out[f"pairs_{action}_detail"] = ("read", (run_id, 1, pair))
    for action in ("keep_original", "accept_correction", "drop", "restore", "reviewed"):
        out[f"critic_{action}"] = ("write", (run_id, 1, verdict, "why"))
        out[f"critic_{action}_reload"] = ("read", critic_filters)
        out[f"critic_{action}_detail"] = ("read", (run_id, 1, verdict))
    return out


def _endpoints_for(store, run_id: str) -> dict[str, tuple[str, tuple | None]]:
    pair, verdict, task = _keys(store, run_id)
    return endpoints(run_id, pair, verdict, task, Path("examples/demo.toml").read_text())


def test_every_endpoint_is_classified(server_a):
    url, store, run_id, demo = server_a
    served = {fn.api_name for fn in demo.fns.values()}
    assert served == set(_endpoints_for(store, run_id))
    assert all(isinstance(name, str) for name in served)  # explicit names only, never gradio's "lambda_3"
    hidden = {fn.api_name for fn in demo.fns.values() if fn.api_visibility == "private"}
    assert not hidden  # every endpoint is reachable by a client, so the tests below reach every one


def _refuses_every_write(url: str, store, run_id: str, demo, auth, refusal: str) -> None:
    from gradio_client import Client

    calls = _endpoints_for(store, run_id)
    client = Client(url, auth=auth, verbose=False, download_files=False)
    before = _snapshot(store)
    # Pickers first: the server checks dropdown values against the choices this session was sent.
    order = ["studio_load", "studio_pick_run", "plans_search", "plans_task", "pairs_search", "critic_queue",
             "metrics_runs"]
    for name in order + sorted(set(calls) - set(order)):
        kind, args = calls[name]
        if args is None:
            continue
        if kind == "write":
            with pytest.raises(Exception, match=refusal):
                client.predict(*args, api_name=f"/{name}")
        else:
            client.predict(*args, api_name=f"/{name}")  # reads work for everyone
    assert _snapshot(store) == before  # no write path changed the store, and no "read" was a write in disguise
    assert demo.moat_jobs.snapshot()["status"] == "idle"


def test_viewer_accounts_are_refused_every_write_over_http(server_a):
    from gradio_client import Client

    url, store, run_id, demo = server_a
    _refuses_every_write(url, store, run_id, demo, ("vera", "pw-vera"), "vera has a read-only viewer account")
    # The same call as a curator goes through: the refusal above was the guard, not a broken call.
    ann = Client(url, auth=("ann", "pw-ann"), verbose=False)
    ann.predict(api_name="/studio_load")
    ann.predict(run_id, api_name="/studio_pick_run")
    ann.predict(*_endpoints_for(store, run_id)["pairs_search"][1], api_name="/pairs_search")
    pair = _keys(store, run_id)[0]
    # vera opened every item above (/pairs_claim, /critic_claim) but holds none: a viewer, who can decide nothing,
    # must not hold an item against the curators
    assert not demo.moat_ctx.leases.taken(("pair", run_id, 1), [pair], "ann")
    assert "“Swap” recorded" in ann.predict(run_id, 1, pair, 0, 1, "why", api_name="/pairs_swap")
    assert store.query("SELECT curator FROM overrides WHERE action = 'swap'")["curator"].tolist() == ["ann"]


def test_read_only_studio_refuses_every_write_over_http(server_b):
    url, store, run_id, demo = server_b
    _refuses_every_write(url, store, run_id, demo, None, "This studio is read-only")


# -- free text never reaches SQL unparameterised ---------------------------------------------------------------

def test_filters_and_search_are_parameterised(server_b):
    from gradio_client import Client

    from studio import tab_critic, tab_pairs, tab_plans

    url, store, run_id, demo = server_b
    before = _snapshot(store)
    pairs = store.pairs_page(run_id, 1, limit=10**6)
    tasks = store.query("SELECT task_id, question FROM tasks WHERE run_id = ?", [run_id])

    def want_pairs(text: str) -> int:
        t = text.lower()
        return sum(t in str(q).lower() or t in str(c).lower() or t in str(r).lower()
                   for q, c, r in zip(pairs.question, pairs.chosen_text, pairs.rejected_text))

    def want_tasks(text: str) -> int:
        t = text.lower()
        return sum(t in q.lower() or t in i.lower() for i, q in zip(tasks.task_id, tasks.question))

    probes = [*PAYLOADS, pairs.question.iloc[0][:10], "the", "1"]
    for text in probes:
        assert tab_pairs.pairs_table(store, run_id, 1, text=text, size=10**6)[1] == want_pairs(text), text
        assert tab_plans.task_page(store, run_id, 1, text=text, size=10**6).shape[0] == want_tasks(text), text
    for text in PAYLOADS:  # exact-match filters: no such domain / split / status -> nothing
        assert len(tab_plans.task_page(store, run_id, 1, domain=text)) == 0
        assert len(tab_plans.task_page(store, run_id, 1, split=text)) == 0
        assert tab_critic.verdict_table(store, run_id, 1, status=text)[1] == 0
        with pytest.raises(ValueError):
            store.pairs_page(run_id, 1, order=text)  # ORDER BY comes from a whitelist
        with pytest.raises(ValueError):
            store.frame(text, run_id)  # table names too
        with pytest.raises(ValueError):
            store.frame("tasks", run_id, **{text: 1})  # and column names
    # % is no wildcard: it matches only the rows that contain a literal "%" (tiny models may write one), not all.
    assert tab_pairs.pairs_table(store, run_id, 1, text="%")[1] == want_pairs("%") < len(pairs)
    # The same payloads through the HTTP API of the search handlers.
    client = Client(url, verbose=False)
    client.predict(api_name="/studio_load")
    client.predict(run_id, api_name="/studio_pick_run")
    for text in PAYLOADS[:6]:
        info = client.predict(run_id, 1, "", "", text, "any", "any", "any", "task", 1, None, api_name="/pairs_search")
        assert re.match(rf"{want_pairs(text)} rows? ", info[0]), (text, info[0])
        info = client.predict(run_id, 1, text, "", "", 1, api_name="/plans_search")
        assert re.match(rf"{want_tasks(text)} rows? ", info[0]), (text, info[0])
    assert _snapshot(store) == before


# -- paths from the page stay in the workspace -----------------------------------------------------------------

def test_config_paths_from_the_page_stay_in_the_workspace(server_a, tmp_path_factory):
    from gradio_client import Client

    from engine.config import config_to_dict, load_config
    from engine.loop import run_config
    from studio.new_run_config import config_toml

    url, store, run_id, demo = server_a
    base = tmp_path_factory.getbasetemp().resolve()
    outside = Path("/").resolve() / "etc"
    link = base / "escape-link"
    if not link.exists():
        link.symlink_to(outside)
    config = run_config(store, run_id)
    client = Client(url, auth=("ann", "pw-ann"), verbose=False)
    runs = len(store.list_runs())
    elsewhere = base.parent / "moat-elsewhere"  # next to the workspace, not in it
    for dotted, value in (("data.tasks", str(base / ".." / ".." / "etc" / "passwd")),
                          ("data.tasks", "/etc/passwd"),
                          ("data.tasks", str(link / "passwd")),
                          ("planner.path", str(link)),
                          ("run.workdir", str(elsewhere)),
                          ("sft.original_data", "../../../etc/hosts")):
        section, name = dotted.split(".")
        bad = load_config(None, base=config_to_dict(config))
        setattr(getattr(bad, section), name, value)
        message = client.predict(config_toml(bad), api_name="/run_create")[0]
        # the field, and its line in the submitted config
        assert re.match(rf"Not created: \*\*{re.escape(dotted)}, line \d+\*\*", message), message
        assert "inside the workspace" in message, message
    assert len(store.list_runs()) == runs and not elsewhere.exists()
    ok = client.predict(config_toml(config), api_name="/run_create")[0]  # the same config, paths inside: created
    assert ok.startswith("Created run"), ok


# -- API keys stay out of the store, logs, exports and the page ------------------------------------------------

def test_api_key_never_reaches_store_logs_exports_or_page(secret_run, server_a):
    from gradio_client import Client

    db, run_id, logs, exports = secret_run
    url, store, _, demo = server_a
    assert os.environ[KEY_ENV] == SECRET
    for path in [db, *db.parent.glob("*.wal")]:
        assert SECRET.encode() not in path.read_bytes(), path
    dump = json.dumps(_snapshot(store)) + json.dumps(
        {t: store.query(f'SELECT * FROM "{t}"').to_dict("records") for t in ("verdicts", "critic_cache", "runs",
                                                                          "stages", "overrides")}, default=str)
    assert "***" in dump  # the fake server echoed the key; the critic masked it before storing
    assert SECRET not in dump
    files = list(exports.iterdir())
    assert len(files) == 3 and all(SECRET.encode() not in f.read_bytes() for f in files)
    assert logs and any("retry" in line for line in logs)  # the retry was logged, with the key masked
    assert not [line for line in logs if SECRET in line]
    ann = _login(url, "ann", "pw-ann")
    for path in ("", "config", "gradio_api/info"):
        assert SECRET not in ann.get(path).text, path
    client = Client(url, auth=("ann", "pw-ann"), verbose=False)
    client.predict(api_name="/studio_load")
    client.predict(run_id, api_name="/studio_pick_run")
    pair, verdict, task = _keys(store, run_id)
    rendered = [client.predict(run_id, 1, "", "any", "task", 1, None, api_name="/critic_queue"),
                client.predict(run_id, 1, verdict, api_name="/critic_detail"),
                client.predict(run_id, "", api_name="/run_refresh"),
                client.predict(run_id, None, api_name="/metrics_figures")]
    assert SECRET not in json.dumps(rendered, default=str)


def test_config_with_a_key_is_refused_and_never_stored(server_a):
    from gradio_client import Client

    from engine.config import load_config
    from engine.errors import ConfigError

    for override in (f"critic.api_key={SECRET}", f"critic.api_key_env={SECRET}", f"tools.qa_api_key_env={SECRET}",
                     f"critic.base_url=http://me:{SECRET}@host/v1", f"critic.model={SECRET}", "sft.token=abc",
                     SECRET):
        with pytest.raises(ConfigError, match="api_key_env|NAME of an environment variable|section.field") as err:
            load_config(None, [override])
        assert SECRET not in str(err.value), override
    url, store, run_id, demo = server_a
    client = Client(url, auth=("ann", "pw-ann"), verbose=False)
    text = Path("examples/demo.toml").read_text().replace("[critic]", f'[critic]\napi_key = "{SECRET}"')
    assert text != Path("examples/demo.toml").read_text()
    runs = len(store.list_runs())
    for api in ("/run_validate", "/run_create"):
        shown = client.predict(text, api_name=api)[0]
        assert "critic.api_key" in shown and "api_key_env" in shown and SECRET not in shown
    assert len(store.list_runs()) == runs
    assert SECRET not in json.dumps(store.query("SELECT config_json FROM runs").to_dict("records"), default=str)


# -- Spaces: the demo agents and capped sizes only, over HTTP ----------------------------------------------------

def test_spaces_mode_refuses_other_models_and_over_cap_sizes_over_http(server_c):
    from gradio_client import Client

    from engine.config import config_to_dict, load_config
    from studio.new_run_config import config_toml
    from studio.spaces_policy import spaces_capped

    url, store, run_id, demo = server_c
    client = Client(url, verbose=False)
    runs = len(store.list_runs())
    capped = spaces_capped(load_config("examples/demo.toml"))
    cases = [("planner.path", "gpt2", "only the demo agent"),
             ("grounder.path", "assets/demo/planner", "only the demo agent"),
             ("planner.adapter", "assets/demo/grounder", "no adapters"),
             ("critic.backend", "hf", "reference critic"),
             ("tools.qa_base_url", "http://198.51.100.7/v1", "no external QA model"),
             ("sample.backend", "vllm", "only hf"), ("launch.mode", "accelerate", "only inprocess"),
             ("sample.k", 5, "at most 4"), ("data.train_limit", 0, "at most 16"),
             ("data.eval_limit", 21, "at most 20"), ("run.iterations", 2, "at most 1")]
    for dotted, value, why in cases:
        bad = load_config(None, base=config_to_dict(capped))
        section, name = dotted.split(".")
        setattr(getattr(bad, section), name, value)
        if dotted == "critic.backend":
            bad.critic.model = "some/model"
        if dotted == "tools.qa_base_url":
            bad.tools.qa_model = "m"
        message = client.predict(config_toml(bad), api_name="/run_create")[0]
        assert re.match(rf"Not created: \*\*{re.escape(dotted)}, line \d+\*\*", message), (dotted, message)
        assert why in message, (dotted, message)
    assert len(store.list_runs()) == runs
    client.predict(api_name="/studio_load")
    started = client.predict(run_id, api_name="/run_next_stage")  # a run from elsewhere (tiny agents): refused
    assert started.startswith("Refused on Spaces") and "did not start this run" in started, started
    assert demo.moat_jobs.snapshot()["status"] == "idle"
    default = demo.config["components"]
    editor = next(c for c in default if c.get("props", {}).get("elem_id") == "run-config")["props"]["value"]
    assert client.predict(editor, api_name="/run_validate")[0] == "Config is valid."  # the page starts capped
