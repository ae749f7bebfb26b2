"""Launch MOAT Studio. Until the studio lands, print what it will serve and exit 0."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    print("MOAT Studio: the Gradio studio is not built yet; use `python -m engine --help` for the engine CLI.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
