"""Prompt rendering that reproduces Lumos's planner/grounder training records byte for byte.

Contract (strings copied from allenai/lumos ``data/process_for_train.py``; the shared lumos_derived_* samples are
the reference and the round-trip tests check them):

* ``planner_messages(task, subgoals=None, formulation="onetime", results=None)`` and
  ``grounder_messages(task, subgoals, actions=None, formulation="onetime", results=None)`` return chat message lists
  ``[{"role": "user"|"assistant", "content": str}, ...]``: training records when the assistant side is given, scoring
  or generation prompts (ending on a user turn) when it is cut short.
* ``render_chat(messages, template="lumos"|"tokenizer", tokenizer=None, add_generation_prompt=False)`` renders the
  open-instruct layout Lumos checkpoints were trained on (``<|user|>\\n{user}\\n<|assistant|>\\n{assistant}</s>\\n``
  per turn, contents stripped, the whole text stripped), or the tokenizer's own chat template.
* ``prompt_and_completion(messages, ...)`` splits the final assistant turn off as TRL prompt/completion text; the
  prompt ends with ``"<|assistant|>\\n"`` under the lumos layout and ``prompt + completion == render_chat(messages)``.

Subgoals are passed without their ``Subgoal k: `` prefix; ``format_subgoals`` adds it back and joins with ``"; "``
(each subgoal keeps its own final period). Domains are Task domains: "maths", "qa", "web".
"""

from __future__ import annotations

from typing import Any

from engine.tasks import Task

Message = dict[str, str]

PLANNER_INSTRUCTION = "Please provide a reasonable subgoal-based plan to solve the given task.\n"
PLANNER_TASK_SUFFIX = "; Initial Environment Description: None."
GROUNDER_INSTRUCTION = (
    "Please ground the given subgoal to corresponding executable actions for solving the given task. "
    "The grounded actions must be the one in available action list.\n\n"
)
# Per-domain action list + descriptions, verbatim from Lumos (note the duplicated Calculator line for complex_qa).
ACTION_LISTS = {
    "maths": (
        "The available action list is 'Calculator', 'SetEquation', 'SolveEquation', 'Count', 'SolveInequality', "
        "'Code', and 'Define'.\n"
        "Calculator(formula): Calculate the input formula; SetEquation(equation): Set up an equation to be solved; "
        "SolveEquation(equation): Solve the previous set equation; Count(list): Count the number of elements in the "
        "given list; SolveInequality(inequality): Solve the previous set inequality; Code(pseudo_code): Generate a "
        "Python function that corresponds to the pseudo code; Define(variable/number): Define a variable or a "
        "number for latter usage.\n\n"
    ),
    "qa": (
        "The available action list is 'KnowledgeQuery', 'ParagraphRetrieve', 'QA', 'Calculator', and 'Code'.\n"
        "Calculator(formula): Calculate the input formula; KnowledgeQuery(query): Capture the relevant webpages "
        "according to the query; ParagraphRetrieve(context, query): Given a query, retrieve the most relevant "
        "paragraphs from the given context; QA(context, query): Given context, answer the given query; "
        "Calculator(formula): Calculate the input formula; Code(pseudo_code): Generate a Python function that "
        "corresponds to the pseudo code.\n\n"
    ),
    "web": (
        "The available action list is 'CLICK', 'TYPE', 'SELECT'.\n"
        "CLICK(Env, Query): Click the relevant html region in Env according to Query; TYPE(Env, Query, Text): Type "
        "Text into the relevant html region in Env according to Query; SELECT(Env, Query, Text): Select the value "
        "Text of the relevant selection box in Env according to Query.\n\n"
    ),
}
ONETIME_SUBGOALS = "Subgoals to be grounded: "
ITERATIVE_SUBGOAL = "Subgoal to be grounded: "
GROUNDING_RESULTS = " The grounding could be based on the following results:"
KEEP_PLANNING = "No, I will keep planning. "
STOP_PLANNING = "Yes, I will stop planning."
STOP_QUESTION = ". Should we stop planning?"
FORMULATIONS = ("onetime", "iterative")
LUMOS_EOS = "</s>"


def format_subgoals(subgoals: list[str]) -> str:
    """``["a.", "b."]`` -> ``"Subgoal 1: a.; Subgoal 2: b."`` (Lumos's onetime plan and grounder input)."""
    return "; ".join(f"Subgoal {k}: {s}" for k, s in enumerate(subgoals, start=1))


def planner_user(question: str) -> str:
    return f"{PLANNER_INSTRUCTION}Task: {question}{PLANNER_TASK_SUFFIX}"


def grounder_header(domain: str, question: str) -> str:
    """The grounder's first-turn preamble up to and including ``Task: {question} \\n``."""
    if domain not in ACTION_LISTS:
        raise ValueError(f"no Lumos action list for domain {domain!r} (known: {', '.join(ACTION_LISTS)})")
    return f"{GROUNDER_INSTRUCTION}{ACTION_LISTS[domain]}Task: {question} \n"


def planner_feedback(domain: str, k: int, subgoal: str, result: str | None) -> str:
    """The user turn after subgoal ``k``: its executed result (web: a restatement of the subgoal)."""
    if domain == "web":
        # Lumos restates the subgoal with a lower-cased first letter instead of the (long) HTML result.
        phrase = result if result is not None else subgoal[:1].lower() + subgoal[1:]
        return f"We have already {phrase}".strip(".").strip() + STOP_QUESTION
    if result is None:
        raise ValueError(f"iterative planning needs the executed result of subgoal {k}")
    # Lumos strips whitespace and periods from the result before adding its own ". Should we stop planning?".
    return f"The executed result for Subgoal {k} is {result.strip().strip('.')}".strip() + STOP_QUESTION


def _check_formulation(formulation: str) -> None:
    if formulation not in FORMULATIONS:
        raise ValueError(f"formulation must be one of {', '.join(FORMULATIONS)}, got {formulation!r}")


def planner_messages(
    task: Task, subgoals: list[str] | None = None, formulation: str = "onetime", results: list[str] | None = None
) -> list[Message]:
    """Planner chat for ``task``; without ``subgoals`` just the opening user turn (a generation prompt).

    Iterative: after subgoal k comes the feedback turn built from ``results[k-1]`` (web derives it from the subgoal
    when ``results`` is None); a result for the last subgoal closes the chat with "Yes, I will stop planning.", so
    passing one result fewer than subgoals leaves the chat ending on the last subgoal.
    """
    _check_formulation(formulation)
    messages = [{"role": "user", "content": planner_user(task.question)}]
    if subgoals is None:
        return messages
    if formulation == "onetime":
        return messages + [{"role": "assistant", "content": format_subgoals(subgoals)}]
    if results is None and task.domain == "web":
        results_or_none: list[str | None] = [None] * len(subgoals)
    else:
        results_or_none = list(results or [])
    for k, subgoal in enumerate(subgoals, start=1):
        text = f"Subgoal {k}: {subgoal}"
        messages.append({"role": "assistant", "content": text if k == 1 else KEEP_PLANNING + text})
        if k > len(results_or_none):
            if k < len(subgoals):
                raise ValueError(f"iterative planning needs the executed result of subgoal {k}")
            return messages
        messages.append({"role": "user", "content": planner_feedback(task.domain, k, subgoal, results_or_none[k - 1])})
    messages.append({"role": "assistant", "content": STOP_PLANNING})
    return messages


def _grounding_results(k: int, results: list[str]) -> str:
    """QA's later grounder turns list the earlier subgoals' results.

    Lumos sorts the ``"Subgoal i"`` keys as strings, so "Subgoal 10" precedes "Subgoal 2"; kept for fidelity.
    """
    known = [i for i in range(1, k) if i <= len(results)]
    text = GROUNDING_RESULTS
    for i in sorted(known, key=lambda i: f"Subgoal {i}"):
        text += f" The execution result for Subgoal {i} is {results[i - 1]}"
    return text


def grounder_messages(
    task: Task,
    subgoals: list[str],
    actions: list[str] | None = None,
    formulation: str = "onetime",
    results: list[str] | None = None,
) -> list[Message]:
    """Grounder chat for ``task``'s ``subgoals``.

    Onetime: one user turn with all subgoals, then (if ``actions``) one assistant turn ``"; ".join(actions)``.
    Iterative: one user turn per subgoal, each followed by ``actions[k]`` while actions last, so ``subgoals[:k+1]``
    with ``actions[:k]`` is the prompt for grounding subgoal k+1. QA turns after the first also list ``results``
    (the earlier subgoals' execution results as the grounder sees them, e.g. ``"3."``).
    """
    _check_formulation(formulation)
    header = grounder_header(task.domain, task.question)
    if formulation == "onetime":
        messages = [{"role": "user", "content": f"{header}{ONETIME_SUBGOALS}{format_subgoals(subgoals)}\n"}]
        if actions is not None:
            joined = "; ".join(a.strip() for a in actions if a.strip())
            messages.append({"role": "assistant", "content": joined})
        return messages
    messages = []
    actions = actions or []
    for k, subgoal in enumerate(subgoals, start=1):
        text = f"{ITERATIVE_SUBGOAL}Subgoal {k}: {subgoal}"
        if k == 1:
            text = header + text
        elif task.domain == "qa":
            text += _grounding_results(k, results or [])
        messages.append({"role": "user", "content": text + "\n"})
        if k > len(actions):
            break
        messages.append({"role": "assistant", "content": actions[k - 1]})
    return messages


def _lumos_turns(messages: list[Message], eos: str) -> str:
    """open-instruct's ``_concat_messages`` (used by Lumos's finetune.py), turn by turn."""
    text = ""
    for message in messages:
        role, content = message["role"], message["content"].strip()
        if role == "system":
            text += f"<|system|>\n{content}\n"
        elif role == "user":
            text += f"<|user|>\n{content}\n"
        elif role == "assistant":
            text += f"<|assistant|>\n{content}{eos}\n"
        else:
            raise ValueError(f"invalid role {role!r}")
    return text


def render_chat(
    messages: list[Message], template: str = "lumos", tokenizer: Any = None, add_generation_prompt: bool = False
) -> str:
    """Render a chat; ``template="tokenizer"`` defers to ``tokenizer.apply_chat_template`` (a config choice)."""
    if template == "tokenizer":
        if tokenizer is None:
            raise ValueError("template='tokenizer' needs a tokenizer")
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
    if template != "lumos":
        raise ValueError(f"template must be 'lumos' or 'tokenizer', got {template!r}")
    eos = getattr(tokenizer, "eos_token", None) or LUMOS_EOS
    text = _lumos_turns(messages, eos)
    if add_generation_prompt:
        return text + "<|assistant|>\n"
    return text.strip()


def training_completion(completion: str, eos: str | None) -> str:
    """The completion an SFT row gives TRL: the assistant's text without its end-of-turn token, which TRL appends
    (and scoring scores: the target + EOS). A chat template may render text after that token (ChatML's newline after
    ``<|im_end|>``, Qwen2.5 and SmolLM2): taken off only as a suffix, it stayed, and TRL trained on
    ``...<|im_end|>\n<|im_end|>``, tokens after the turn had ended. Cut at the last EOS followed by whitespace only."""
    if eos:
        head, found, tail = completion.rpartition(eos)
        if found and not tail.strip():
            return head
    return completion


def prompt_and_completion(messages: list[Message], template: str = "lumos", tokenizer: Any = None) -> tuple[str, str]:
    """Split the final assistant turn off: ``(prompt, completion)`` with ``prompt + completion`` the full chat."""
    if not messages or messages[-1]["role"] != "assistant":
        raise ValueError("the last message must be the assistant turn to complete")
    prompt = render_chat(messages[:-1], template, tokenizer, add_generation_prompt=True)
    full = render_chat(messages, template, tokenizer)
    if not full.startswith(prompt):
        raise ValueError("the chat template does not render the prompt as a prefix of the full chat")
    return prompt, full[len(prompt) :]
