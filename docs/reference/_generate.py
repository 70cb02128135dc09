"""Writes the reference's pages: one per package, one per name in a package's ``__all__``.

The public surface is the ``__all__`` of ``jaxcal`` and of each package in ``PACKAGES``.
A name that several packages export (``jaxcal.PlattScaling`` is
``jaxcal.calibrators.PlattScaling``) is documented once, on the page of its home package
(the one that defines it, else the first in ``PACKAGES`` to export it); its other pages
say whose name it is and link there. conf.py runs :func:`write_pages` at the start of each
build, so the pages follow the code; ``api/`` is generated, not kept in git.

    python docs/reference/_generate.py    # writes docs/reference/api/ without building
"""

from __future__ import annotations

import importlib
import inspect
import pathlib
import types
from typing import NamedTuple

# the order of the index; a name that several packages export and none defines is
# documented in the first of them here below ``jaxcal``
PACKAGES = (
    "jaxcal",
    "jaxcal.calibrators",
    "jaxcal.functional",
    "jaxcal.metrics",
    "jaxcal.losses",
    "jaxcal.scoremodels",
    "jaxcal.bayes",
    "jaxcal.debias",
    "jaxcal.decide",
    "jaxcal.recsys",
    "jaxcal.clicks",
    "jaxcal.clicks.io",
    "jaxcal.data",
    "jaxcal.plot",
    "jaxcal.distributed",
    "jaxcal.sklearn",
)
API_DIR = "api"
# a constant's value is shown when its repr is at most this long
_MAX_VALUE_REPR = 120


class Entry(NamedTuple):
    """One public name: ``package.name``, the object, and where it is documented."""

    package: str
    name: str
    obj: object
    kind: str  # "package", "module", "class", "function", "data"
    home: str  # the full name whose page documents the object

    @property
    def full_name(self) -> str:
        return f"{self.package}.{self.name}"

    @property
    def is_alias(self) -> bool:
        return self.home != self.full_name


def _kind(obj: object) -> str:
    if isinstance(obj, types.ModuleType):
        return "package" if obj.__name__ in PACKAGES else "module"
    if inspect.isclass(obj):
        return "class"
    if callable(obj):
        return "function"
    return "data"


def public_names(package: str) -> list[str]:
    """The names of ``package.__all__`` that the reference documents (not ``__version__``)."""
    module = importlib.import_module(package)
    return [name for name in module.__all__ if not name.startswith("__")]


def public_entries() -> list[Entry]:
    """Every public name of every package in ``PACKAGES``, in index order."""
    found = []
    for package in PACKAGES:
        module = importlib.import_module(package)
        for name in public_names(package):
            found.append((package, name, getattr(module, name)))

    def home_of(package: str, name: str, obj: object) -> str:
        kind = _kind(obj)
        if kind == "package":
            return obj.__name__
        if kind == "data":  # a constant is its own: equal values are not one name
            return f"{package}.{name}"
        exporters = [p for p, n, o in found if n == name and o is obj]
        defined_in = getattr(obj, "__module__", "") or ""
        defining = [p for p in exporters if defined_in == p or defined_in.startswith(p + ".")]
        # the deepest package that defines it, else the first to export it below jaxcal
        if defining:
            return f"{max(defining, key=len)}.{name}"
        return f"{next((p for p in exporters if p != 'jaxcal'), exporters[0])}.{name}"

    return [Entry(p, n, o, _kind(o), home_of(p, n, o)) for p, n, o in found]


def _title(text: str, underline: str = "=") -> str:
    return f"{text}\n{underline * len(text)}\n"


def _role(entry: Entry) -> str:
    return {
        "package": "mod",
        "module": "mod",
        "class": "class",
        "function": "func",
        "data": "data",
    }[entry.kind]


def _describe(entry: Entry) -> str:
    """The autodoc directive of a class, function or constant, relative to its package."""
    if entry.kind == "class":
        # members of the class and of its (often private) bases: predict, save, fields;
        # not the tuple methods of a NamedTuple
        return (
            f".. autoclass:: {entry.name}\n"
            "   :members:\n"
            "   :inherited-members: tuple, object\n"
            "   :show-inheritance:\n"
        )
    if entry.kind == "function":
        return f".. autofunction:: {entry.name}\n"
    if len(repr(entry.obj)) <= _MAX_VALUE_REPR:
        return f".. autodata:: {entry.name}\n"
    text = f".. autodata:: {entry.name}\n   :no-value:\n"
    if isinstance(entry.obj, dict):  # too long to show: its keys
        keys = ", ".join(f"``{key!r}``" for key in entry.obj)
        text += f"\n   A ``dict`` with the keys {keys}.\n"
    return text


def _name_page(entry: Entry, entries: list[Entry]) -> str:
    head = _title(f"``{entry.full_name}``")
    if entry.is_alias:
        return (
            f"{head}\n.. currentmodule:: {entry.package}\n\n"
            f"``{entry.full_name}`` is :{_role(entry)}:`{entry.home}`, documented there.\n"
        )
    body = f"{head}\n.. currentmodule:: {entry.package}\n\n"
    if entry.kind != "module":
        return body + _describe(entry)
    # a module that is a name of a package (``jaxcal.metrics.ranking``): its docstring and
    # a table of its names, each linked to the page that documents it
    module = entry.obj
    homes = {id(e.obj): e for e in entries if not e.is_alias}
    rows, here = [], []  # here: the names no package page documents
    for name in getattr(module, "__all__", []):
        obj = getattr(module, name)
        own = Entry(module.__name__, name, obj, _kind(obj), f"{module.__name__}.{name}")
        rows.append(homes.get(id(obj), own))
        here += [] if id(obj) in homes else [own]
    text = body + f".. automodule:: {module.__name__}\n   :no-members:\n\n" + _table(rows)
    if here:
        text += f"\n.. currentmodule:: {module.__name__}\n\n"
        text += "\n".join(_describe(e) for e in here)
    return text


def summary(obj: object) -> str:
    """The first sentence of the docstring (of the first paragraph, where a sentence's end
    cannot be told from a full stop inside a literal), on one line."""
    doc = inspect.getdoc(obj) or ""
    paragraph = " ".join(doc.split("\n\n", 1)[0].split())
    for i in range(len(paragraph)):
        head = paragraph[: i + 1]
        if head.endswith(".") and paragraph[i + 1 : i + 2] in ("", " ") and _balanced(head):
            paragraph = head
            break
    return paragraph.removesuffix(":").removesuffix(":")


def _balanced(text: str) -> bool:
    return text.count("`") % 2 == 0 and text.count("(") == text.count(")")


def _table(rows: list[Entry]) -> str:
    """A two-column table: the name, linked to its page, and its summary."""
    if not rows:
        return ""
    lines = [".. list-table::", "   :widths: 35 65", ""]
    for entry in rows:
        target = entry.home or entry.full_name
        if entry.kind == "data":
            text = f"``{type(entry.obj).__name__}``"
            if len(repr(entry.obj)) <= _MAX_VALUE_REPR:
                text += f" ``{entry.obj!r}``"
        else:
            text = summary(entry.obj) or "\\"  # an escaped space: an empty cell
        lines += [f"   * - :{_role(entry)}:`~{target}`", f"     - {text}"]
    return "\n".join(lines) + "\n"


def _package_page(package: str, entries: list[Entry]) -> str:
    own = [e for e in entries if e.package == package]
    toctree = "".join(f"   {e.full_name}\n" for e in own if e.kind != "package")
    text = (
        _title(f"``{package}``")
        + f"\n.. automodule:: {package}\n   :no-members:\n\n"
        + _title("Public names", "-")
        + "\n"
        + _table(own)
    )
    if toctree:
        text += f"\n.. toctree::\n   :hidden:\n\n{toctree}"
    return text


def pages() -> dict[str, str]:
    """File name (relative to ``api/``) -> text, for every page."""
    entries = public_entries()
    out = {f"{p}.rst": _package_page(p, entries) for p in PACKAGES}
    for entry in entries:
        if entry.kind != "package":
            out[f"{entry.full_name}.rst"] = _name_page(entry, entries)
    return out


def write_pages(root: str | pathlib.Path) -> pathlib.Path:
    """Writes the pages into ``root / api``; files whose text is unchanged are left alone
    (so an incremental build rebuilds only what changed) and stale ones are removed."""
    out_dir = pathlib.Path(root) / API_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    wanted = pages()
    for stale in set(p.name for p in out_dir.glob("*.rst")) - set(wanted):
        (out_dir / stale).unlink()
    for name, text in wanted.items():
        path = out_dir / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    return out_dir


if __name__ == "__main__":
    print(write_pages(pathlib.Path(__file__).parent))
