"""``python -m engine config``: the whole run config, every field with its help, as ``run`` would use it.

Contract: ``config [--config FILE] [--set SECTION.FIELD=VALUE ...] [--section S ...]`` prints the resolved config as
TOML on stdout (the file and the overrides applied and checked as ``run`` checks them; without ``--config`` the
defaults of ``engine.config``, not the demo's), each field preceded by its help as a ``#`` comment, and exits 0.
What it prints is a config ``run --config`` reads back to the same values (a starting point to edit). A bad value
is reported as by ``run`` (``FILE:LINE: field: ...`` or ``--set ...``) with exit 2. ``--section`` keeps only the
named sections (``--section sample --section dpo``).
"""

from __future__ import annotations

import argparse
import dataclasses

from engine.commands._common import fail

HELP = ("Print the run config as TOML, every field with its help (the defaults, or a --config file with --set "
        "overrides applied): the list of what --set can change.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=None, help="a run config to resolve (TOML or YAML; default: the "
                                                       "engine's defaults, not examples/demo.toml)")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                        help="override a config field, as run's --set")
    parser.add_argument("--section", action="append", default=[], metavar="NAME",
                        help="print only this section (repeat for several; default: all)")


def run(args: argparse.Namespace) -> int:
    from engine.config import RunConfig, commented_toml, load_config
    from engine.errors import ConfigError

    known = [f.name for f in dataclasses.fields(RunConfig)]
    unknown = [name for name in args.section if name not in known]
    if unknown:
        return fail(ConfigError("--section", f"no section {unknown[0]!r} (sections: {', '.join(known)})"))
    try:
        config = load_config(args.config, args.set)
    except ConfigError as exc:
        return fail(exc)
    print(commented_toml(config, args.section or None), end="")
    return 0
