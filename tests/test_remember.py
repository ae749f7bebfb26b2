"""studio.remember: what a browser sends back as saved filters is put back only where the component accepts it."""

from __future__ import annotations

import gradio as gr

from studio.remember import accepted, restored


def _components():
    with gr.Blocks():
        order = gr.Dropdown([("task", "task"), ("smallest margin first", "margin")], value="task")
        reviewed = gr.Radio(["any", "yes", ("overruled the critic", "overruled")], value="any")
        text = gr.Textbox()
    return order, reviewed, text


def test_saved_values_come_back_only_when_the_component_offers_them():
    order, reviewed, text = _components()
    assert accepted(order, "margin") and not accepted(order, "smallest margin first")  # the value, not the label
    assert accepted(reviewed, "overruled") and not accepted(reviewed, "DROP TABLE")
    assert accepted(text, "Calculator") and not accepted(text, 3) and not accepted(text, "x" * 1001)
    ups = restored([order, reviewed, text], ["order", "reviewed", "text"],
                   {"order": "margin", "reviewed": "nope", "text": "tax", "other": 1})
    assert ups[0]["value"] == "margin" and "value" not in ups[1] and ups[2]["value"] == "tax"
    # nothing saved yet (a first visit) or something that is not a dict: every component keeps its default
    for saved in ({}, None, ["margin"], "margin"):
        assert all("value" not in u for u in restored([order, reviewed, text], ["order", "reviewed", "text"], saved))
