"""Every docstring example of ``jaxcal`` runs under doctest (``pytest --doctest-modules``
with the options in pyproject.toml), in a fresh interpreter with JAX's defaults (float32),
which is what a user sees (the rest of the suite runs in float64, tests/conftest.py).
Examples that write files write them into the current folder. The interpreter is set up as
for the documentation pages (tests/test_docs_examples.py).
"""

from __future__ import annotations

from test_docs_examples import DATA_DOCTESTS, ROOT, data_dir, example_env, run_python

__all__ = ["example_env"]  # the fixture, used below by name


def test_docstring_examples_run(tmp_path, example_env):
    args = ["-m", "pytest", "--doctest-modules", str(ROOT / "jaxcal"), "-q", "-n", "0",
            "-p", "no:cacheprovider", "--rootdir", str(ROOT), "-c", str(ROOT / "pyproject.toml"),
            "-o", "addopts=-ra"]  # fmt: skip
    if not data_dir().is_dir():  # these two read the shared data
        args += [f"--deselect={name}" for name in DATA_DOCTESTS]  # node ids from the root
    proc = run_python(args, tmp_path, example_env)
    assert proc.returncode == 0, proc.stdout[-12000:] + proc.stderr[-3000:]
    assert " passed" in proc.stdout, proc.stdout[-3000:]
