"""The curator's side of ``python -m engine bench curation``: a ``gradio_client`` session that makes review decisions
on a running studio and prints how long each took.

Run by the benchmark as its own process (``engine/`` never imports gradio; the studio's HTTP API is the studio's
to speak): ``python -m studio.bench_client --url URL --user U --password P --run-id R --decisions N``. Per decision
it calls what one key press triggers in the browser: the action (``/pairs_reviewed``), the page reload that follows
it, and the next pair's detail. The last stdout line is one JSON object: ``{"times_s": [...], "pairs_on_page": n}``
(seconds per decision, in order; the pairs of the first page, which the decisions cycle through).
"""

from __future__ import annotations

import argparse
import json
import time

# The pair filters of the Pairs tab as a curator first sees them (iteration 1, no search, every status, by task,
# page 1): the arguments the tab's search and reload endpoints take, in order, after the run id.
FIRST_PAGE = (1, "", "", "", "any", "any", "any", "task", 1)


def reload_filters(run_id: str) -> tuple:
    """An action reload's filters: the first page's, less the text filters the session's last load applied."""
    iteration, _low, _high, _text, *choices = FIRST_PAGE
    return (run_id, iteration, *choices)


def decide(url: str, user: str, password: str, run_id: str, decisions: int) -> dict:
    """Open a session on the studio at ``url`` and make ``decisions`` "reviewed" decisions, timing each."""
    from gradio_client import Client

    client = Client(url, auth=(user, password), verbose=False, download_files=False)
    try:
        client.predict(api_name="/studio_load")  # what opening the page does: the run and iteration pickers
        client.predict(run_id, api_name="/studio_pick_run")
        filters = [run_id, *FIRST_PAGE]
        table = client.predict(*filters, None, api_name="/pairs_search")[1]
        keys = [row[0] for row in table["data"]]
        if not keys:
            raise SystemExit(f"bench client: run {run_id} has no pairs on the first page of iteration 1")
        times = []
        for i in range(decisions):
            key, following = keys[i % len(keys)], keys[(i + 1) % len(keys)]
            started = time.perf_counter()
            client.predict(run_id, 1, key, 0, 1, "", api_name="/pairs_reviewed")
            # The action reloads read the Search / Min / Max text the last load applied (session state): not sent.
            client.predict(*reload_filters(run_id), key, api_name="/pairs_reviewed_reload")
            client.predict(run_id, 1, following, api_name="/pairs_detail")
            times.append(time.perf_counter() - started)
    finally:
        client.close()
    return {"times_s": times, "pairs_on_page": len(keys)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studio.bench_client", description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="the studio's address, e.g. http://127.0.0.1:7860/")
    parser.add_argument("--user", required=True, help="login of the curator the reviews are stored under")
    parser.add_argument("--password", required=True, help="that login's password")
    parser.add_argument("--run-id", required=True, help="the run whose iteration-1 pairs are reviewed")
    parser.add_argument("--decisions", type=int, default=10, help="how many decisions to make and time")
    args = parser.parse_args(argv)
    print(json.dumps(decide(args.url, args.user, args.password, args.run_id, args.decisions)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
