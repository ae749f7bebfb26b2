"""studio.picker: a pick made under a queue's previous choices reaches the handler instead of failing the event.

Gradio checks a dropdown's value against the choices it last sent the session; with two events in flight (``j``
pressed while the page reloads, an iteration picked while another's empty queue is sent) the second one carried a
pick that had just been valid and failed with "Value: X is not in the list of choices" (a red toast; CI saw it in
the reload test's log). Checked on the component and through a real served studio with ``gradio_client``.
"""

from __future__ import annotations

import os
import warnings

import pytest

from tests._studio import served_studio

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")


def test_a_stale_pick_of_the_choices_kind_passes_and_anything_else_reads_as_none():
    from studio.picker import MAX_TEXT, Picker

    keys = Picker([("a question", "t-1|0|0")], value=None)
    assert keys.preprocess("t-1|0|0") == "t-1|0|0"
    assert keys.preprocess("t-2|0|1") == "t-2|0|1"  # under the previous page's choices
    for odd in (["t-1|0|0"], 3, True, 1.5, {"k": 1}, "x" * (MAX_TEXT + 1)):
        assert keys.preprocess(odd) is None, odd
    iterations = Picker([0, 1], value=1)
    assert iterations.preprocess(2) == 2 and iterations.preprocess("2") is None and iterations.preprocess(None) is None
    assert iterations.preprocess(10**30) is None
    empty = Picker([], value=None)  # nothing sent yet: a plain value of either kind
    assert empty.preprocess(0) == 0 and empty.preprocess("run-1") == "run-1"
    assert Picker([]).get_block_name() == "dropdown"  # the browser draws Gradio's own dropdown
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Gradio's "not in the list of choices" warning, raised instead of logged
        assert Picker([("a question", "t-1|0|0")], value="t-2|0|1").postprocess("t-2|0|1") == "t-2|0|1"


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_agents_dir, demo_tasks):
    """(url, store, run_id): the studio on a tmp store, served in this process."""
    with served_studio(tmp_path_factory.mktemp("studio_picker"), tiny_agents_dir, demo_tasks) as studio:
        url, store, run_id, _ = studio
        yield url, store, run_id


def test_a_queue_reload_carrying_the_previous_pages_pick_succeeds_and_keeps_it(served):
    from gradio_client import Client

    url, store, run_id = served
    client = Client(url, verbose=False, download_files=False)
    rest = ("", "", "", "any", "any", "any", "task", 1)

    def search(iteration, pick):
        return client.predict(run_id, iteration, *rest, pick, api_name="/pairs_search")

    # A fresh session: the iteration picker has sent no choices yet, as when a tab's load overtakes the run picker.
    _, _, picker, *_ = search(1, None)
    keys = [value for _, value in picker["choices"]]
    assert keys and picker["value"] == keys[0]
    _, _, picker, *_ = search(0, keys[1])  # iteration 0 has no pairs: the session's pair choices become []
    assert picker["choices"] == []
    _, _, picker, *_ = search(1, keys[1])  # the reload sent before that answer arrived: the pick made on page 1
    assert [value for _, value in picker["choices"]] == keys and "value" not in picker  # the pick stays
    assert store.iterations(run_id)[:2] == [0, 1]
