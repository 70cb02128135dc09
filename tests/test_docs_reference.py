"""The API reference (docs/reference): Sphinx builds it from the docstrings with warnings as
errors, it has a page for every public name showing that name's signature and docstring,
and a real browser (headless Chromium) renders it.

The reference is built once for the file (about half a minute on two cores); the tests
read that one build.
"""

from __future__ import annotations

import html
import importlib.util
import inspect
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import jaxcal

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "docs" / "reference"
CHROMIUM = "/usr/bin/chromium"
# CI installs Chromium and sets this: there a missing browser fails the browser test
REQUIRE_BROWSER = os.environ.get("JAXCAL_REQUIRE_BROWSER") == "1"


def _load_generator():
    spec = importlib.util.spec_from_file_location("_reference_pages", SOURCE / "_generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


generate = _load_generator()


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """``sphinx-build -W --keep-going -b html`` of a copy of docs/reference (conf.py writes
    the generated pages next to itself; the copy keeps them out of the work tree)."""
    tmp = tmp_path_factory.mktemp("reference")
    source = tmp / "source"
    shutil.copytree(SOURCE, source, ignore=shutil.ignore_patterns("api", "_build", "__pycache__"))
    out = tmp / "html"
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-b", "html", "-j", "1"]
    run = subprocess.run(
        [*command, "-q", str(source), str(out)], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, f"the reference does not build cleanly:\n{run.stderr[-20000:]}"
    return out


def _page_words(path: Path) -> str:
    """The page's text as words separated by single spaces (tags, scripts, entities and
    punctuation left out)."""
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"<(script|style)\b.*?</\1>", " ", text, flags=re.S)
    text = html.unescape(re.sub(r"<[^>]+>", " ", text))
    return " ".join(re.findall(r"\w+", text))


# spans whose rendered text differs from their source: roles (:class:`~a.B` shows B, math
# is typeset) and substitutions
_MARKUP = re.compile(r":[\w:.-]+:`[^`]*`|`[^`]*`_*|\|[^|]+\|")


def _plain_runs(rst: str) -> list[str]:
    """The runs of plain words of a line of reStructuredText, split at its markup."""
    runs = [" ".join(re.findall(r"\w+", part)) for part in _MARKUP.split(rst.replace("``", ""))]
    return [run for run in runs if run]


def _shows_in_order(runs: list[str], words: str) -> bool:
    at = 0
    for run in runs:
        found = re.search(rf"\b{re.escape(run)}\b", words[at:])
        if not found:
            return False
        at += found.end()
    return True


def test_reference_covers_every_public_package():
    """Every subpackage that ``jaxcal`` exports has its pages (a new one cannot be left out
    of the reference), and every package of the reference has an ``__all__``."""
    subpackages = {
        getattr(jaxcal, name).__name__
        for name in jaxcal.__all__
        if inspect.ismodule(getattr(jaxcal, name))
    }
    assert subpackages <= set(generate.PACKAGES), subpackages - set(generate.PACKAGES)
    for package in generate.PACKAGES:
        assert hasattr(importlib.import_module(package), "__all__"), package


def test_every_public_name_has_a_page_with_its_signature_and_docstring(built):
    """One page per name of each package's ``__all__``: the object's own page carries its
    description (the anchor Sphinx gives a signature, ``id="jaxcal.x.Name"``) and the
    first sentence of its docstring; another name of the same object links to that page."""
    entries = generate.public_entries()
    assert len(entries) > 200  # the walk found the surface, not an empty list
    problems = []
    for entry in entries:
        page = built / "api" / f"{entry.home if entry.kind == 'package' else entry.full_name}.html"
        if not page.exists():
            problems.append(f"{entry.full_name}: no page {page.name}")
            continue
        text = page.read_text(encoding="utf-8")
        if entry.is_alias:
            home = f"{entry.home}.html"
            if f'href="{home}' not in text:
                problems.append(f"{entry.full_name}: does not link to {home}")
            continue
        anchor = f"module-{entry.home}" if entry.kind in ("package", "module") else entry.home
        if f'id="{anchor}"' not in text:
            problems.append(f"{entry.full_name}: no description (id={anchor!r}) on its page")
        first = generate.summary(entry.obj) if entry.kind != "data" else ""
        if first and not _shows_in_order(_plain_runs(first), _page_words(page)):
            problems.append(f"{entry.full_name}: its docstring's {first!r} is not on its page")
    assert not problems, "\n".join(problems)


def test_a_class_page_documents_the_methods_a_user_calls(built):
    """A calibrator's page shows the ``fit`` it inherits from a private base class, with its
    Args section rendered as a parameter list (napoleon), not as raw text; an example
    whose header carries a note (``Example (needs ...):``) is a rendered Example section."""
    page = (built / "api" / "jaxcal.calibrators.PlattScaling.html").read_text(encoding="utf-8")
    assert 'id="jaxcal.calibrators.PlattScaling.fit"' in page
    assert "Parameters" in page and "Args:" not in page
    plot = (built / "api" / "jaxcal.plot.reliability_diagram.html").read_text(encoding="utf-8")
    assert re.search(r'<p class="rubric">Examples?</p>\s*<p>\(needs matplotlib', plot)


def _chromium(*args: str, user_data: Path) -> subprocess.CompletedProcess:
    flags = [
        "--headless",
        "--no-sandbox",  # CI runs as root
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={user_data}",
    ]
    return subprocess.run([CHROMIUM, *flags, *args], capture_output=True, text=True, timeout=120)


def _png_pixels(path: Path) -> np.ndarray:
    """The PNG's pixels (height, width, channels); the signature and chunks checked first."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path.name} is not a PNG"
    assert b"IHDR" in data[:16] and b"IDAT" in data and data.endswith(b"IEND\xaeB`\x82")
    from matplotlib import image

    return image.imread(path)


@pytest.mark.parametrize(
    "page, heading",
    [("index.html", "jaxcal API reference"), ("api/jaxcal.calibrators.PlattScaling.html", None)],
)
def test_a_browser_renders_the_reference(built, tmp_path, page, heading):
    """Headless Chromium loads the page from disk: its DOM has the heading, and its
    1280x900 screenshot decodes and shows a page (many colours, dark text on a light
    ground), not a blank or an error page."""
    if not Path(CHROMIUM).exists():
        message = f"{CHROMIUM} not found: install Debian's chromium (apt-get install chromium)"
        if REQUIRE_BROWSER:
            pytest.fail(message)
        pytest.skip(message)
    url = (built / page).as_uri()
    heading = heading or "jaxcal.calibrators.PlattScaling"
    dom = _chromium("--dump-dom", url, user_data=tmp_path / "profile-dom")
    assert dom.returncode == 0, dom.stderr[-4000:]
    assert re.search(rf'<h1>(<code[^>]*><span class="pre">)?{re.escape(heading)}<', dom.stdout)
    png = tmp_path / "page.png"
    shot = _chromium(
        f"--screenshot={png}", "--window-size=1280,900", url, user_data=tmp_path / "profile"
    )
    assert shot.returncode == 0 and png.exists(), shot.stderr[-4000:]
    pixels = _png_pixels(png)
    assert pixels.shape[:2] == (900, 1280)
    grey = pixels[..., :3].mean(axis=-1)
    assert len(np.unique(pixels[..., :3].reshape(-1, 3), axis=0)) > 50  # text anti-aliasing
    assert 0.5 < (grey > 0.9).mean() < 0.995  # mostly light ground, but not blank
    assert (grey < 0.3).mean() > 0.002  # dark text is drawn
