"""``build_app(store, config_path, read_only, spaces, jobs, viewers, workspace, first_visit) -> gr.Blocks``: one
Blocks app of small per-tab builders.

The app owns no state of its own: the store is passed in (one owning process per DuckDB file), one ``JobWorker``
per store is created here (or passed in) and shared by every session, and everything per session (picked run and
iteration, the curator's name) lives in components and ``gr.State``. Serve it with ``studio.auth.serve`` (the login
gate on every route) and ``head=HEAD`` for the keyboard shortcuts and the table style. The worker is exposed as
``demo.moat_jobs`` (and the shared context, lease book included, as ``demo.moat_ctx``) for the launcher and tests.

Every event has an explicit ``api_name`` (``<tab>_<what>``; UI-internal refreshes are ``undocumented``), so the API
is stable and ``tests/test_studio_security.py`` can classify each endpoint as read or write; every write endpoint
calls ``check_writable`` server side. Config paths from the page must lie inside ``workspace`` (default: the
working directory). Scripts and the load test (``tests/test_studio_load.py``) drive the studio through these names
with ``gradio_client`` (``/studio_load``, ``/studio_pick_run``, ``/pairs_search``, ``/pairs_<action>``,
``/critic_queue``, ``/critic_<action>``, ...).

Who is on the page is learned on load (``/studio_load``, from the request's login): under ``--auth`` the login is
the curator (``studio.common.curator_of``), shown in the name box (not editable) and in the header; a viewer's header
says "Viewing as <login> (read-only)" and every control the tabs registered in ``Ctx.write_controls`` is switched off
for that session (the server-side ``check_writable`` refusal stays the guard).

Under load: the queue runs up to ``CONCURRENCY`` calls of one event at once (Gradio's default is one); a view that
several triggers refresh is one ``always_last`` event, so one session's calls of it never overtake each other.
"""

from __future__ import annotations

import json
from pathlib import Path

import gradio as gr

from engine.store import Store
from studio import place, tab_critic, tab_export, tab_metrics, tab_pairs, tab_plans, tab_run
from studio.browser_secret import browser_secret
from studio.common import Ctx, can_write, identity_line, login_of, session_of
from studio.first_visit import showcase_run, start_showcase, welcome
from studio.jobs import JobWorker
from studio.keys import SHORTCUTS_JS
from studio.pace import SYNC_BUSY_S, poll_seconds
from studio.picker import Picker
from studio.picks import run_iterations
from studio.render import md_escaped
from studio.run_owners import visitor_key_or_new

# Markdown tables (the curation, agreement, experiment and swap tables): whole words, and a table wider than the page
# scrolls sideways. Gradio breaks a cell's words anywhere: headers read "iterat / ion", "pai / rs" even at 1400 px.
# On a phone (a Spaces visitor), the run and iteration pickers, a pair's prompt and its two plans, and a verdict's
# original and correction stack instead of sharing 390 px (three ways: about 100 px each, one word per line); the
# pickers sit in Gradio's form box, not straight in the row. The Run tab's job panel and loss chart stack too (side
# by side each had ~170 px, the log lines clipped; its log lines wrap). At any width the stage table is at least
# 1000 px wide and scrolls sideways below that: Gradio sizes the columns as shares of the table's viewport
# (tab_run.STAGE_WIDTHS), which squeezed them to one letter per line at 390 px and broke "iter/atio/n" over three
# lines on a laptop (Gradio's layout gives it ~700 px of a 1000 px window). The Plans tab's plan table (an HTML
# table, not markdown) sits in a .moat-scroll box that scrolls sideways: at 390 px it was ~450 px wide in a ~300 px box
# that clipped its text column; on a phone its bar column narrows and its text keeps a readable width. A dropdown's
# arrow is drawn over the right end of its text box (Gradio positions it absolutely): a long pick (a pair's question,
# a plan's label) ran under it ("Then I" beneath the arrow on a phone); its text now stops short of the arrow and ends
# in an ellipsis. The config editor's label wraps short of its download and copy buttons (it ran under them on
# a phone).
TABLE_CSS = """<style>
.md table { display: block; overflow-x: auto; max-width: 100%; }
.md table th, .md table td { word-break: normal !important; overflow-wrap: normal !important; }
@media (max-width: 640px) {
  .row:has(> #pairs-prompt), .row:has(> #critic-original), .row:has(> #pick-run),
  .form:has(> #pick-run) { flex-direction: column; }
  #run-job-row { flex-direction: column; align-items: stretch; }
  #run-job pre, #run-job pre code { white-space: pre-wrap; overflow-wrap: anywhere; }
}
#run-stages .upload-container { overflow-x: auto; }
#run-stages .virtual-table-viewport { min-width: 1000px; max-width: none; }
#run-stages td[data-col="1"], #run-stages td[data-col="1"] span {
  white-space: nowrap !important; word-break: keep-all !important; overflow-wrap: normal !important; }
.moat-scroll { display: block; overflow-x: auto; max-width: 100%; }
.secondary-wrap:has(> .icon-wrap) > input[role="combobox"] { padding-right: 28px; text-overflow: ellipsis; }
#run-config label[data-testid="block-label"] { max-width: calc(100% - 56px); }
.moat-plans-bar { width: 160px; min-width: 60px; }
.moat-plans-text { white-space: pre-wrap; min-width: 16em; }
@media (max-width: 640px) { .moat-plans-bar { width: 60px; } }
</style>"""
HEAD = SHORTCUTS_JS + TABLE_CSS
# Tab id -> label. The ids are what studio.place keeps in the browser, so a renamed label keeps saved places.
TABS = {"run": "Run", "plans": "Plans", "pairs": "Pairs", "critic": "Critic", "metrics": "Metrics", "export": "Export"}
# Events of one kind (say, eight curators loading the Pairs page) may run this many at once. Gradio's default is 1
# per event, which queues every session behind the others; handlers only query the store (a DuckDB cursor each,
# thread-safe) or append an override (atomic, see engine.curation), so they can overlap. Jobs run on the worker
# thread, not in these slots. With overlap, two calls of one session could finish out of order (a stale page
# painted over a fresh one), so every view that several triggers refresh is ONE event with
# trigger_mode="always_last": a session's next call of it waits for the one in flight.
CONCURRENCY = 8
# The page's view key (Ctx.view) of a run and an iteration; the js builds the same string in the browser.
VIEW_KEY_JS = "(run, iteration) => `${run ?? ''}\\n${iteration ?? ''}`"


def view_key(run_id: str | None, iteration: int | None) -> str:
    return f"{run_id or ''}\n{'' if iteration is None else iteration}"


def build_app(store: Store, config_path: str = "examples/demo.toml", read_only: bool = False, spaces: bool = False,
              jobs: JobWorker | None = None, viewers: frozenset[str] = frozenset(),
              workspace: str | Path | None = None, first_visit: bool = False) -> gr.Blocks:
    jobs = jobs or JobWorker(store, read_only=read_only, own_jobs_only=spaces)
    secret = browser_secret(store.path)  # curators' names, places and filters survive a restart
    showcase = start_showcase(store, jobs, config_path, spaces) if first_visit else None
    with gr.Blocks(title="MOAT Studio") as demo:
        mode = " · read-only" if read_only else ""
        mode += " · Spaces demo (sizes capped, demo agents only)" if spaces else ""
        # A Space's visitor gets the file name only: the server's directories are none of their business.
        gr.Markdown(f"## MOAT Studio\nStore `{store.path.name if spaces else store.path}`{mode}")
        if showcase:
            # The welcome follows the demo run (preparing, then where to look), asked on load and every 2 s until
            # the run has finished, as the Run tab's refresh does.
            welcome_md = gr.Markdown(welcome(store, jobs, showcase)[0], elem_id="first-visit")
            welcome_timer = gr.Timer(2.0)

            def on_welcome():
                text, settled = welcome(store, jobs, showcase)
                return text, gr.Timer(active=not settled)

            gr.on([demo.load, welcome_timer.tick], on_welcome, None, [welcome_md, welcome_timer],
                  show_progress="hidden", api_name="studio_welcome", api_visibility="undocumented",
                  trigger_mode="always_last")
        with gr.Row():
            run = Picker([], label="Run", elem_id="pick-run", scale=3)
            iteration = Picker([], label="Iteration", elem_id="pick-iteration", scale=1)
            name = gr.Textbox(label="Curator name (once per session)", elem_id="curator-name", scale=2)
            who = gr.Markdown(elem_id="curator-who")
        curator = gr.State("")
        pending = gr.State({})  # the saved run and iteration, until the run picker has taken them once
        # {"run", "its", "auto"}: the run the iteration picker was last filled for, the choices it was sent, and the
        # value the studio chose itself (None: the curator's pick, or a place restored from the browser); None until
        # on_run has filled it once for this session.
        shown_iterations = gr.State(None)
        # The same "auto" in the page, for the place's save (js cannot read a gr.State): a place saved while the
        # picker shows the studio's own pick keeps no iteration, so a reload lands on the default of that moment (a
        # first visit shown iteration 0 came back to 0 after the run had trained iteration 1). A pick of the curator's
        # clears it.
        auto_pick = gr.Number(None, visible="hidden", precision=0, elem_id="iteration-auto")
        view = gr.Textbox("", visible="hidden", elem_id="view-key")  # see Ctx.view
        shown_tab = gr.Textbox(next(iter(TABS)), visible="hidden", elem_id="tab-key")  # see Ctx.tab
        renamed = gr.Textbox("", visible="hidden", elem_id="curator-renamed")  # see Ctx.renamed

        def on_run(run_id, wanted, shown=None):
            if run_id and isinstance(shown, dict) and shown.get("run") == run_id:
                # The picker was filled for this run already: the page fires the run picker's change again for one
                # pick when a listener of it is asked for again while it runs (Gradio dispatches the whole change
                # again: studio.relay), and the second call (the saved place already spent) put the picker back on
                # the default after a curator's pick or a reload's restore. New iterations are sync's.
                return gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip()
            its = run_iterations(store, run_id)
            done = place.done_iterations(store, run_id, its)
            picked = place.pick_iteration(its, run_id, wanted, done)
            restored = place.pick_iteration(its, run_id, {}, done) != picked  # the saved place, not the default
            auto = None if restored else picked
            return (gr.update(choices=its, value=picked), {}, {"run": run_id, "its": its, "auto": auto}, auto,
                    view_key(run_id, picked))

        # Registered before the tabs: the page dispatches a change's listeners in the order they were added, and every
        # tab's view waits on the iteration this one picks. Registered last, it came after every tab's run.change
        # call: on a one-iteration store the picker filled 3.7 s after the page was asked for, now 1.2 s. The tabs'
        # views listen to the view key it sets (Ctx.view), not to both pickers: each is drawn once per load and per
        # run switch (a load of the browser tests' store: 23 events, 31 when each queue was drawn for the run and
        # again for its iteration).
        run.change(on_run, [run, pending, shown_iterations], [iteration, pending, shown_iterations, auto_pick, view],
                   api_name="studio_pick_run")
        # Any other move of the iteration (the sync's, the curator's): the key follows it in the browser. On a run
        # switch on_run has set both already, so this computes the key it has and changes nothing.
        iteration.change(None, [run, iteration], view, js=VIEW_KEY_JS, show_progress="hidden",
                         api_name="studio_view_key", api_visibility="undocumented")
        iteration.input(None, None, auto_pick, js="() => null", show_progress="hidden",
                        api_name="studio_iteration_picked", api_visibility="undocumented")
        ctx = Ctx(store=store, jobs=jobs, read_only=read_only, spaces=spaces, run=run, iteration=iteration,
                  curator=curator, viewers=frozenset(viewers),
                  workspace=Path(workspace).resolve() if workspace else Path.cwd(), browser_secret=secret, view=view,
                  tab=shown_tab, renamed=renamed)
        builders = {"run": lambda: tab_run.build(ctx, config_path), "plans": lambda: tab_plans.build(ctx),
                    "pairs": lambda: tab_pairs.build(ctx), "critic": lambda: tab_critic.build(ctx),
                    "metrics": lambda: tab_metrics.build(ctx), "export": lambda: tab_export.build(ctx)}
        tab_blocks = {}
        with gr.Tabs(overflow_behavior="wrap") as tabs:  # every tab in sight on a phone, not behind a "..." menu
            for tab_id, label in TABS.items():
                with gr.Tab(label, id=tab_id) as tab_blocks[tab_id]:
                    builders[tab_id]()
        # Where this browser was (tab, run, iteration), kept by studio.place: a reload comes back there. Saved by the
        # browser itself (js, no server call): a server-side save still queued when the page reloads would run
        # against the closed session and be lost.
        saved_place = gr.BrowserState({}, storage_key="moat-studio-place", secret=secret)

        def on_load(wanted, request: gr.Request):
            """The run picker, then who this session is: under a login the header names the login (the curator
            of every decision, curator_of) and the name box shows it, not editable (a typed name changed the header
            only); without a login both are left alone (a name typed before the page finished loading must survive
            it). For a session that may change nothing (a viewer) every registered write control is switched off;
            otherwise they are left as built."""
            rows = store.list_runs()
            runs = [r["run_id"] for r in rows]
            # On Spaces a session without a saved place opens on the demo run the welcome talks about, not on the
            # newest run: there that is often another visitor's experiment under way.
            landing = showcase_run(rows) if spaces else None
            user = login_of(request)
            off = gr.update(interactive=False) if not can_write(ctx, request) else gr.skip()
            return (gr.update(choices=runs, value=place.pick_run(runs, wanted, landing)),
                    identity_line(ctx, user) if user else gr.skip(),
                    gr.update(value=user, interactive=False, label="Your login") if user else gr.skip(),
                    *[off] * len(ctx.write_controls))

        def sync_iterations(run_id, current, shown):
            """A running run gains iterations (a first visit's run has none when the page opens): offer them as they
            appear. Nothing is sent while the list is unchanged, so an open picker is not redrawn under the
            curator, and a pick they made stays. Until on_run has filled the picker for this run (``shown`` is None
            or another run's), the picker is on_run's: a tick racing a reload's restore used to replace the saved
            iteration by the default, and one racing a run switch fought on_run over the value."""
            if not run_id or not isinstance(shown, dict) or shown.get("run") != run_id:
                return gr.skip(), gr.skip(), gr.skip()
            its = run_iterations(store, run_id)
            # The studio's own pick of iteration 0 (no plans, pairs or verdicts) moves to the newest training
            # iteration with a stage done as soon as there is one: a first visit's picker sat on 0 after the demo run
            # had trained iteration 1. A curator's pick, a restored place and a training iteration (perhaps
            # mid-review) stay; an iteration that has only started is not picked (its pages are still empty).
            following = isinstance(current, int) and current < 1 and current == shown.get("auto")
            if its == shown.get("its") and not following:
                return gr.skip(), gr.skip(), gr.skip()
            value, auto = current, shown.get("auto")
            if current not in its or following:
                done = place.done_iterations(store, run_id, its)
                trained = [i for i in done if i >= 1]
                if current not in its:
                    value = auto = place.pick_iteration(its, run_id, {}, done)
                elif trained:
                    value = auto = max(trained)
            if its == shown.get("its") and value == current:
                return gr.skip(), gr.skip(), gr.skip()
            return (gr.update(choices=its, value=value), {"run": run_id, "its": its, "auto": auto},
                    gr.skip() if auto == shown.get("auto") else auto)

        # On a Space, this browser's visitor key (studio.run_owners): bound to the page by the restore, which runs
        # before the run picker is filled and so before any tab asks who may curate, so a reload (or a second tab)
        # still owns the runs this browser started.
        visitor = [gr.BrowserState("", storage_key="moat-studio-visitor", secret=secret)] if spaces else []

        def on_restore(saved):
            where = place.read(saved, TABS)
            # Nothing saved: leave the tabs alone (a tab clicked while the page loads must stay shown).
            return where, gr.Tabs(selected=where["tab"]) if "tab" in where else gr.update()

        def on_restore_visitor(saved, kept, request: gr.Request):
            """The restore, and this page bound to its browser's visitor key (a new key kept when it had none)."""
            key, new = visitor_key_or_new(kept)
            jobs.owners.bind(session_of(request), key)
            return *on_restore(saved), key if new else gr.skip()

        # The name is kept in this browser too (studio.remember's way): typed once, it survives reloads.
        saved_name = gr.BrowserState("", storage_key="moat-studio-curator", secret=secret)

        def on_name(typed: str, request: gr.Request):
            """The name typed in the box becomes this session's curator and is kept in the browser; under a login
            nothing changes (the login curates, curator_of): the header keeps saying who really decides."""
            user = login_of(request)
            if user:
                return gr.skip(), identity_line(ctx, user), gr.skip(), gr.skip()
            typed = (typed or "").strip()
            return typed, f"Curating as **{md_escaped(typed)}**" if typed else "", typed, typed

        gr.on([name.submit, name.blur], on_name, name, [curator, who, saved_name, renamed],
              api_name="studio_curator_name", api_visibility="undocumented", trigger_mode="always_last")

        def restore_name(saved, request: gr.Request):
            if getattr(request, "username", None) or not (isinstance(saved, str) and saved.strip()):
                return gr.update(), gr.update(), gr.update()
            saved = saved.strip()[:200]
            return saved, saved, f"Curating as **{md_escaped(saved)}**"

        # The restore runs first, so the run picker's first value is the saved run, not the newest; then the saved
        # name, so the tabs' first loads (after the run picker's) read as the returning curator.
        demo.load(on_restore_visitor if spaces else on_restore, [saved_place, *visitor], [pending, tabs, *visitor],
                  show_progress="hidden",
                  api_name="studio_restore_place", api_visibility="undocumented").then(
            restore_name, saved_name, [name, curator, who], show_progress="hidden",
            api_name="studio_restore_name", api_visibility="undocumented").then(
            on_load, pending, [run, who, name, *ctx.write_controls], api_name="studio_load")
        for tab_id, block in tab_blocks.items():
            block.select(None, [run, iteration, auto_pick, saved_place], saved_place, js=place.save_js(tab_id),
                         show_progress="hidden", api_name=f"studio_tab_{tab_id}", api_visibility="undocumented")
            # The tab shown (Ctx.tab), set by the browser itself: no server call at each tab switch. The restore's
            # pick of the saved tab fires it too (a reload on the Pairs tab: "pairs").
            block.select(None, None, shown_tab, js=f"() => {json.dumps(tab_id)}", show_progress="hidden",
                         api_name=f"studio_tab_shown_{tab_id}", api_visibility="undocumented")
        gr.on([run.change, iteration.change, auto_pick.change], None, [run, iteration, auto_pick, saved_place],
              saved_place, js=place.save_js(),
              show_progress="hidden", api_name="studio_place_save", api_visibility="undocumented")
        for hook in ctx.load_hooks:
            hook(demo)
        # Paced by the job worker (studio.pace): every 3 s while a job runs, every 10 s otherwise.
        sync_timer, sync_pace = gr.Timer(poll_seconds(jobs, SYNC_BUSY_S)), gr.State(None)

        def paced_sync(run_id, current, shown, paced=None):
            pace = poll_seconds(jobs, SYNC_BUSY_S)
            return (*sync_iterations(run_id, current, shown), gr.skip() if pace == paced else gr.Timer(pace), pace)

        sync_timer.tick(paced_sync, [run, iteration, shown_iterations, sync_pace],
                        [iteration, shown_iterations, auto_pick, sync_timer, sync_pace], show_progress="hidden",
                        api_name="studio_sync_iterations", api_visibility="undocumented", trigger_mode="always_last")
    demo.queue(default_concurrency_limit=CONCURRENCY)
    demo.moat_jobs = jobs
    demo.moat_ctx = ctx  # tests read the lease book through it
    return demo
