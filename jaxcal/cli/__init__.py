"""The ``jaxcal`` command line: a thin shell over the public API.

Each subcommand lives in its own module here and exposes ``add_parser(subparsers)``,
which registers the subcommand and sets ``func`` (called with the parsed arguments).

Most of a first ``jaxcal demo`` or ``jaxcal reproduce`` run is XLA compilation. jaxcal's own
programs are cached across runs by the library (``jaxcal._compilation_cache``, in
``$JAXCAL_COMPILATION_CACHE``, default ``~/.cache/jaxcal/xla``; ``0`` turns it off). The
command line (an application, unlike the library, which never changes global JAX settings)
also turns on JAX's persistent compilation cache, in the ``jax`` folder inside it, for the
other programs a run compiles (NumPyro's samplers, JAX's own helpers, eager operations),
every one of them however fast it compiles (JAX's default keeps only programs that compile
for over a second). That folder has one
subfolder per version of jaxcal's source (older ones are removed): a jaxcal program that
JAX loads from its own cache is not stored in jaxcal's (``jaxcal._jit``), so after an
upgrade JAX's cache must miss once for jaxcal's to fill again. A cache directory the user
already gave JAX (``JAX_COMPILATION_CACHE_DIR``) is left as it is.
"""

from __future__ import annotations

import argparse
import importlib
import re
import shutil
import sys
from pathlib import Path

import jax

from jaxcal import __version__
from jaxcal._compilation_cache import CACHE_ENV, cache_dir, source_digest

__all__ = ["main", "build_parser", "compilation_cache_dir", "enable_compilation_cache"]

_COMMANDS = ("clicks", "demo", "reproduce", "sweep")


def compilation_cache_dir() -> Path | None:
    """Where the command line keeps JAX's compiled programs, or None (cache off)."""
    root = cache_dir()
    return None if root is None else root / "jax" / source_digest()[:16]


def enable_compilation_cache() -> Path | None:
    """Turn on JAX's persistent compilation cache for this process (command line only);
    returns the directory in use, or None when it is off."""
    current = jax.config.jax_compilation_cache_dir
    if current:  # the user configured JAX already
        return Path(current)
    path = compilation_cache_dir()
    if path is None:
        return None
    try:
        path.mkdir(parents=True, exist_ok=True)
        for old in path.parent.iterdir():  # the folders of other versions of jaxcal
            if old != path and re.fullmatch("[0-9a-f]{16}", old.name):
                shutil.rmtree(old, ignore_errors=True)
    except OSError:  # read-only home: run without a cache
        return None
    jax.config.update("jax_compilation_cache_dir", str(path))
    # every program, not only those that compile in over a second (JAX's default): a run
    # compiles dozens of small ones (eager operations, 0.02-0.15 s each), and loading one
    # takes milliseconds
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    return path


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``jaxcal`` parser; with ``command``, only that subcommand's module is imported
    (the others are listed by name), so that starting one command does not import the
    studies and models of the others."""
    parser = argparse.ArgumentParser(
        prog="jaxcal",
        description="Calibrated probabilities for ranking, recommendation and click models.",
        epilog=(
            f"Compiled XLA programs are cached in ${CACHE_ENV} (default "
            "$XDG_CACHE_HOME/jaxcal/xla or ~/.cache/jaxcal/xla; 0 turns the cache off), so "
            "repeated runs skip most of their compilation."
        ),
    )
    parser.add_argument("--version", action="version", version=f"jaxcal {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in _COMMANDS:
        if command in (None, name):
            importlib.import_module(f"jaxcal.cli.{name}").add_parser(sub)
        else:
            sub.add_parser(name)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    first = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(first if first in _COMMANDS else None)
    args = parser.parse_args(argv)
    args.argv = argv  # a command that starts worker processes passes them on
    enable_compilation_cache()
    try:
        return int(args.func(args) or 0)
    except ValueError as exc:  # bad input: one clear line, no traceback
        print(f"jaxcal {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
