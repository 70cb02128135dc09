"""What the subcommands' parsers share: a parser documented by its module docstring."""

from __future__ import annotations

import argparse

__all__ = ["documented_parser"]


def documented_parser(
    subparsers: argparse._SubParsersAction, name: str, help: str, doc: str | None
) -> argparse.ArgumentParser:
    """A subcommand parser whose description is the first paragraph of ``doc`` (a module
    docstring) and whose epilog is the rest (examples, kept as written)."""
    paragraphs = (doc or "").split("\n\n")
    return subparsers.add_parser(
        name,
        help=help,
        description=paragraphs[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(paragraphs[1:]),
    )
