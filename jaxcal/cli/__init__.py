"""The ``jaxcal`` command line: a thin shell over the public API.

Each subcommand lives in its own module here and exposes ``add_parser(subparsers)``,
which registers the subcommand and sets ``func`` (called with the parsed arguments).
"""

from __future__ import annotations

import argparse
import importlib
import sys

__all__ = ["main", "build_parser"]

_COMMANDS = ("demo", "reproduce", "sweep")


def build_parser() -> argparse.ArgumentParser:
    from jaxcal import __version__

    parser = argparse.ArgumentParser(
        prog="jaxcal",
        description="Calibrated probabilities for ranking, recommendation and click models.",
    )
    parser.add_argument("--version", action="version", version=f"jaxcal {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in _COMMANDS:
        importlib.import_module(f"jaxcal.cli.{name}").add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ValueError as exc:  # bad input: one clear line, no traceback
        print(f"jaxcal {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
