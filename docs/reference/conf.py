"""Sphinx configuration of the API reference: one page per public name, from the docstrings.

Build (warnings are errors in tests/test_docs_reference.py):

    sphinx-build docs/reference docs/_build/html
"""

import os
import pathlib
import re
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # importing jaxcal needs no accelerator
sys.path.insert(0, str(pathlib.Path(__file__).parent))

import _generate  # noqa: E402

import jaxcal  # noqa: E402

project = "jaxcal"
author = "the jaxcal authors"
copyright = "the jaxcal authors"
release = version = jaxcal.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",  # Google-style Args / Returns / Raises / Example
]

# the pages follow the code: regenerated from the packages' __all__ at every build
_generate.write_pages(pathlib.Path(__file__).parent)
root_doc = "index"
exclude_patterns = ["_build"]

napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False  # the return type goes with the description, as in the source

autodoc_member_order = "bysource"
# No type hints in the pages: the docstrings give each argument's type and shape
# (``[n]`` scores, ``[B, n]`` batches), and autodoc would spell ``jax.typing.ArrayLike`` out
# as its eight-member union everywhere (``autodoc_type_aliases`` names it only where it
# stands alone, not in ``ArrayLike | None``).
autodoc_typehints = "none"
# A reference that does not resolve (a private base class, a JAX or NumPy type without an
# intersphinx inventory, which would need the network) is shown as text, not an error.
nitpicky = False

html_theme = "alabaster"
html_title = f"jaxcal {release} API reference"
html_theme_options = {"sidebar_collapse": True, "page_width": "1100px"}
html_show_sourcelink = False


_EXAMPLE_WITH_NOTE = re.compile(r"^(\s*)(Examples?) (\(.*)$")


def _example_notes(app, what, name, obj, options, lines):
    """jaxcal writes what an example needs in its section header, ``Example (needs
    matplotlib):``, a form napoleon does not know (and a header of two lines is not even
    valid reStructuredText). Before napoleon reads the docstring, the header becomes
    napoleon's ``Example:`` with the note as the section's first paragraph."""
    i = 0
    while i < len(lines):
        found = _EXAMPLE_WITH_NOTE.match(lines[i])
        end = i  # the note goes on, without a blank line, to the line that closes it
        while found and not lines[end].rstrip().endswith("):") and end < i + 3:
            if end + 1 == len(lines) or not lines[end + 1].strip():
                break
            end += 1
        if not found or not lines[end].rstrip().endswith("):"):
            i += 1
            continue
        indent, section = found.group(1), found.group(2)
        note = " ".join([found.group(3), *(line.strip() for line in lines[i + 1 : end + 1])])
        lines[i : end + 1] = [f"{indent}{section}:", f"{indent}    {note[:-1]}", ""]
        i += 3


def _drop_type_docstring(app, what, name, obj, options, lines):
    """A constant without a ``#:`` comment would show its type's docstring (``dict``'s,
    ``tuple``'s): that documents Python, not the constant, so it is left out."""
    type_doc = getattr(type(obj), "__doc__", None) or ""
    if what == "data" and lines and type_doc.strip().startswith(lines[0].strip() or "\0"):
        lines.clear()


def _skip_member(app, what, name, obj, skip, options):
    """Leaves out members that are not jaxcal's to document: a NamedTuple's generated field
    accessors ("Alias for field number 0"; the class's ``Attributes:`` section describes
    the fields) and methods inherited from another library's base class (scikit-learn's
    ``get_params`` / ``set_params`` / ``score`` on the adapter, whose docstrings point into
    scikit-learn's own documentation)."""
    if (getattr(obj, "__doc__", None) or "").startswith("Alias for field number"):
        return True
    function = getattr(obj, "fget", obj)  # a property's getter
    module = getattr(function, "__module__", None)
    if isinstance(module, str) and not module.startswith("jaxcal") and callable(function):
        return True
    return None


def setup(app):
    app.connect("autodoc-process-docstring", _example_notes, priority=100)  # before napoleon
    app.connect("autodoc-process-docstring", _drop_type_docstring)
    app.connect("autodoc-skip-member", _skip_member)
