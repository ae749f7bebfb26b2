"""``python -m engine execute``: run a Lumos action string with the offline tools and print one JSON object.

The JSON has ``ok``, ``values``, ``answer``, ``error`` and ``steps``; when ``ok`` is false ``answer`` is null and
``values`` holds the variables bound before the failing step. Exit codes: 0 when ``ok`` is true, 1 when it is false
(the actions did not parse or a step failed: the JSON is still printed and says why), 2 when a file named on the
command line is missing or bad (nothing printed on stdout).
"""

from __future__ import annotations

import argparse

from engine.commands._common import fail, positive_seconds, print_json
from engine.errors import DataError

HELP = "Run Lumos actions (maths/qa tools offline) and print the result as JSON."
EXIT_CODES = ("exit status: 0 when the JSON's ok is true; 1 when it is false (the actions did not parse or a step "
              "failed: the JSON is still printed, its error says why, its answer is null and its values are the "
              "variables bound before the failure); 2 when --context is missing or bad")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EXIT_CODES
    parser.add_argument("--domain", choices=("maths", "qa", "web"), required=True,
                        help="which tools to use; web actions are parsed but not run (there is no browser "
                             "environment offline): each value is the action's argument text and ok only says "
                             "they parse")
    parser.add_argument("--actions", required=True, help='actions, e.g. "R1 = Calculator(3*4); R2 = Calculator(R1+5)"')
    parser.add_argument("--context", metavar="FILE", help='corpus JSONL of {"title", "text"} rows (qa)')
    parser.add_argument("--time-limit", type=positive_seconds, default=2.0, help="seconds per tool call (default 2)")
    parser.add_argument("--qa-base-url", help="OpenAI-compatible endpoint for QA(...) actions (default: extractive)")
    parser.add_argument("--qa-model", help="model name at --qa-base-url")


def run(args: argparse.Namespace) -> int:
    from engine.executor import ToolEnv, execute
    from engine.tools.qa import Corpus

    try:
        corpus = Corpus.from_jsonl(args.context) if args.context else None
    except DataError as exc:
        return fail(exc)
    qa_model = None
    if args.qa_model:
        import os

        from engine.tools.qa import OpenAIQA

        key = os.environ.get("OPENAI_API_KEY") or "EMPTY"
        qa_model = OpenAIQA(args.qa_model, base_url=args.qa_base_url, api_key=key)
    env = ToolEnv(corpus=corpus, qa_model=qa_model, time_limit_s=args.time_limit)
    result = execute(args.actions, args.domain, env)
    print_json(result.to_dict())
    return 0 if result.ok else 1
