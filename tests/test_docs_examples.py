"""The examples of the documentation run as written and print what they show.

* Every ```` ```python ```` block of README.md and docs/*.md runs: the blocks of a page in
  order (a block may use what an earlier block of its page defined), in a fresh interpreter
  in an empty folder, as a user who pastes them would run them. A ```` ```text ```` block
  right after a line that starts with "prints" and ends with ":" is the output of the
  python block above it; the test compares it with what that block printed (the text
  exactly, up to white space; every number to one unit in its last written digit). A
  warning of jaxcal's own (``ConvergenceWarning``, ...) fails the page: an example must not
  show one that the page does not explain.
* Every docstring example of ``jaxcal`` runs (tests/test_docstring_examples.py, a file of
  its own so that the two go to different xdist workers).

Each interpreter compiles its own programs (jaxcal's compilation cache is off, as in the
rest of the suite), so a page's result does not depend on the pages that ran before it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import NamedTuple

import pytest

# (this module is imported by the example interpreters too: no jax, no conftest here)
ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# files a page must have written (beyond running without an error)
WRITES = {
    "docs/tutorial.md": ["plots/reliability.png", "plots/maps.png", "plots/scores.png"],
}
# examples that read the shared real data (Coat, TianGong-ST): skipped without it
_READS_DATA = re.compile(r"load_coat\(|default_data_dir\(")
DATA_DOCTESTS = [
    "jaxcal/data/coat.py::jaxcal.data.coat.load_coat",
    "jaxcal/clicks/io/tiangong.py::jaxcal.clicks.io.tiangong.read_tiangong",
]


def data_dir() -> Path:
    """The shared real data, found as tests/conftest.py finds it."""
    return Path(os.environ.get("JAXCAL_DATA_DIR") or ROOT.parent / "shared" / "data").resolve()


_FENCE = re.compile(r"^```(\S*)\s*$")
_PRINTS = re.compile(r"^prints\b.*:\s*$", re.IGNORECASE)
_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


class Block(NamedTuple):
    line: int  # first line of the code in the page (1-based)
    code: str
    output: str | None  # what the block prints, where the page shows it


def python_blocks(page: Path) -> list[Block]:
    """The ```` ```python ```` blocks of a markdown page, each with the output the page shows
    for it (or ``None``)."""
    return parse_blocks(page.read_text(encoding="utf-8"))


def parse_blocks(markdown: str) -> list[Block]:
    """:func:`python_blocks` of markdown text."""
    blocks: list[Block] = []
    lang, start, body, after_python = None, 0, [], False
    paragraph: list[str] = []  # the last paragraph of prose since the last fence
    blank = True  # the previous line was blank (a new paragraph starts)
    for number, line in enumerate(markdown.splitlines(), 1):
        m = _FENCE.match(line)
        if lang is None and m:
            prose = " ".join(paragraph)
            shows_output = m.group(1) == "text" and after_python and _PRINTS.match(prose)
            lang = "output" if shows_output else m.group(1)
            start, body = number + 1, []
        elif lang is not None and line.rstrip() == "```":
            text = "\n".join(body) + "\n"
            if lang == "python":
                blocks.append(Block(start, text, None))
            elif lang == "output":
                blocks[-1] = blocks[-1]._replace(output=text)
            after_python, paragraph, blank, lang = lang == "python", [], True, None
        elif lang is not None:
            body.append(line)
        elif not line.strip():
            blank = True
        else:
            paragraph, blank = [line.strip()] if blank else [*paragraph, line.strip()], False
    return blocks


def outputs_match(got: str, want: str) -> bool:
    """The same text up to white space, and every number within one unit of the last digit
    written in ``want`` (``0.0533`` matches anything from 0.0532 to 0.0534)."""
    got, want = " ".join(got.split()), " ".join(want.split())
    if _NUMBER.sub("#", got) != _NUMBER.sub("#", want):
        return False
    for g, w in zip(_NUMBER.findall(got), _NUMBER.findall(want), strict=True):
        unit = Decimal(10) ** Decimal(w.rstrip(".") if w.endswith(".") else w).as_tuple().exponent
        if abs(Decimal(g) - Decimal(w)) > unit:
            return False
    return True


# Runs the blocks of one page (argv[1]) in one namespace, so that a traceback names the page
# and its line; exit 3: a warning of jaxcal's own; exit 4: a block printed something other
# than the output the page shows.
_RUNNER = r"""
import contextlib, io, sys, warnings
sys.path.insert(0, sys.argv[2])
from pathlib import Path
from test_docs_examples import outputs_match, python_blocks

class Tee(io.StringIO):
    def write(self, s):
        sys.__stdout__.write(s)
        return super().write(s)

page = Path(sys.argv[1])
namespace = {"__name__": "__main__"}
wrong = []
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for block in python_blocks(page):
        with contextlib.redirect_stdout(Tee()) as out:
            exec(compile("\n" * (block.line - 1) + block.code, str(page), "exec"), namespace)
        if block.output is not None and not outputs_match(out.getvalue(), block.output):
            wrong.append(f"{page}:{block.line}: printed\n{out.getvalue()}shown\n{block.output}")
for w in caught:
    print(f"{w.filename}:{w.lineno}: {w.category.__name__}: {w.message}", file=sys.stderr)
for message in wrong:
    print(message, file=sys.stderr)
ours = [w for w in caught if w.category.__module__.split(".")[0] == "jaxcal"]
sys.exit(3 if ours else 4 if wrong else 0)
"""


@pytest.fixture(scope="module")
def example_env():
    """Environment of the example interpreters: JAX's defaults, the shared real data, a
    non-interactive plot backend, no compilation cache on disk."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    env.update(JAXCAL_DATA_DIR=str(data_dir()), JAXCAL_COMPILATION_CACHE="0", MPLBACKEND="Agg")
    return env


def run_python(args, cwd, env):
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )


def test_blocks_and_shown_outputs_are_found():
    text = (
        "# t\n\n```python\nprint(1)\n```\n\nprints (float32):\n\n```text\n1\n```\n\n"
        "```bash\nls\n```\n\n```text\nnot an output\n```\n\n```python\nx = 2\n```\n\n"
        "Then:\n\n```text\nnot an output either\n```\n\n```python\nprint(3)\n```\n\n"
        "prints three, as the\nline above says:\n\n```text\n3\n```\n"
    )
    assert parse_blocks(text) == [
        Block(4, "print(1)\n", "1\n"),
        Block(22, "x = 2\n", None),
        Block(32, "print(3)\n", "3\n"),
    ]
    assert outputs_match("0.05335  [1.  2.]\n", "0.0533 [1. 2.]")
    assert outputs_match("3165.0", "3165.")
    assert not outputs_match("0.0536", "0.0533")
    assert not outputs_match("ECE 0.0533", "NLL 0.0533")
    assert not outputs_match("1 2", "1")


@pytest.mark.parametrize(
    "page", [p for p in PAGES if python_blocks(p)], ids=lambda p: str(p.relative_to(ROOT))
)
def test_page_examples_run(page, tmp_path, example_env):
    if not data_dir().is_dir() and _READS_DATA.search(page.read_text(encoding="utf-8")):
        pytest.skip(f"reads the shared data, not found at {data_dir()} (set JAXCAL_DATA_DIR)")
    proc = run_python(["-c", _RUNNER, str(page), str(Path(__file__).parent)], tmp_path, example_env)
    assert proc.returncode == 0, (
        f"{page.name}: exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    )
    for name in WRITES.get(str(page.relative_to(ROOT)), []):
        assert (tmp_path / name).stat().st_size > 0, name
