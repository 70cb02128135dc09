"""The ``jaxcal`` command line: help texts, argument errors, and one small demo run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from jaxcal.cli import main
from jaxcal.cli.demo import CALIBRATORS

DEMO_OPTIONS = (
    "--seed", "--n-users", "--n-items", "--validation-fraction", "--n-bins", "--propensity",
    "--calibrators", "--out", "--jobs", "--no-plots", "--quiet",
)  # fmt: skip


def _exit_code(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    out = capsys.readouterr()
    return info.value.code, out.out, out.err


def test_help_lists_subcommands(capsys):
    code, out, _ = _exit_code(["--help"], capsys)
    assert code == 0
    assert "demo" in out and "reproduce" in out
    assert "calibrate a simulated recommender" in out  # the demo's one-line help


def test_a_command_imports_only_its_own_module():
    """``jaxcal demo`` does not import the studies of ``jaxcal reproduce`` (start-up time)."""
    code = (
        "import sys; from jaxcal.cli import build_parser; "
        "args = build_parser('demo').parse_args(['demo', '--no-plots']); "
        "print(args.command, 'jaxcal.reproduce' in sys.modules, 'jaxcal.cli.reproduce' in "
        "sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["demo", "False", "False"]


def test_version(capsys):
    import jaxcal

    code, out, _ = _exit_code(["--version"], capsys)
    assert code == 0 and out.strip() == f"jaxcal {jaxcal.__version__}"


def test_no_subcommand_is_an_error(capsys):
    code, _, err = _exit_code([], capsys)
    assert code == 2 and "COMMAND" in err


def test_demo_help_documents_every_option(capsys):
    code, out, _ = _exit_code(["demo", "--help"], capsys)
    assert code == 0
    for option in DEMO_OPTIONS:
        assert option in out, option
    for name in CALIBRATORS:  # the choices of --calibrators are listed
        assert name in out.replace("\n", " ").replace("  ", " "), name
    assert "default: 300" in out and "default: jaxcal-demo" in out  # defaults are shown


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["demo", "--n-users", "0"], "positive integer"),
        (["demo", "--n-items", "x"], "positive integer"),
        (["demo", "--validation-fraction", "1.5"], r"\(0, 1\)"),
        (["demo", "--calibrators", "PlattScaling,Nope"], "unknown calibrator"),
        (["demo", "--propensity", "guess"], "invalid choice"),
    ],
)
def test_demo_rejects_bad_arguments(argv, match, capsys):
    import re

    code, _, err = _exit_code(argv, capsys)
    assert code == 2 and re.search(match, err), err


def test_value_errors_become_one_line_messages(tmp_path, capsys):
    # n_items = 1 passes argparse but the simulator rejects it: exit status 2, no traceback
    code = main(["demo", "--n-items", "1", "--out", str(tmp_path), "--quiet", "--no-plots"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("jaxcal demo: error:") and "n_items" in err
    assert "Traceback" not in err


@pytest.mark.slow
def test_demo_with_no_arguments(tmp_path):
    """The README's main job: ``jaxcal demo`` as is, on the embedded default simulation."""
    import csv
    import subprocess
    import sys
    import time
    from pathlib import Path

    script = Path(sys.executable).parent / "jaxcal"
    if script.exists():
        cmd = [str(script), "demo"]
    else:  # not installed as a console script: the same entry point
        cmd = [sys.executable, "-c", "import sys; from jaxcal.cli import main; sys.exit(main())",
               "demo"]  # fmt: skip
    start = time.perf_counter()
    out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - start
    assert out.returncode == 0, out.stderr[-3000:]
    assert "done" in out.stderr.splitlines()[-1]  # progress lines on stderr
    folder = tmp_path / "jaxcal-demo"
    with open(folder / "results.csv", newline="") as fh:
        rows = {(r["calibrator"], r["loss"]): r for r in csv.DictReader(fh)}
    names = sorted({name for name, loss in rows if loss == "ips"})
    assert {"PlattScaling", "GaussianCalibration", "GammaCalibration"} <= set(names)
    for name in names:  # IPS brings the maps to the truth
        assert float(rows[name, "ips"]["ece"]) < float(rows[name, "naive"]["ece"]), name
        assert float(rows[name, "ips"]["rmse_true"]) < float(rows[name, "naive"]["rmse_true"])
    if importlib_has("matplotlib"):
        assert len(list(folder.glob("*.png"))) == 5
    print(f"jaxcal demo: {wall:.1f} s wall")  # the README promises < 60 s on 2 cores


def importlib_has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def test_compilation_cache_location(monkeypatch, tmp_path):
    from jaxcal._compilation_cache import source_digest
    from jaxcal.cli import compilation_cache_dir

    version = source_digest()[:16]  # one folder per version of jaxcal's source
    monkeypatch.setenv("JAXCAL_COMPILATION_CACHE", "0")
    assert compilation_cache_dir() is None
    monkeypatch.setenv("JAXCAL_COMPILATION_CACHE", str(tmp_path / "c"))
    assert compilation_cache_dir() == tmp_path / "c" / "jax" / version
    monkeypatch.delenv("JAXCAL_COMPILATION_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compilation_cache_dir() == tmp_path / "xdg" / "jaxcal" / "xla" / "jax" / version


def test_main_turns_the_cache_on_before_running(monkeypatch, tmp_path, capsys):
    import jaxcal.cli as cli

    calls = []
    monkeypatch.setattr(cli, "enable_compilation_cache", lambda: calls.append(True))
    code = cli.main(["demo", "--n-items", "1", "--out", str(tmp_path), "--quiet", "--no-plots"])
    assert code == 2 and calls == [True]  # called once, before the (failing) command


def test_compilation_cache_is_written_and_reused(tmp_path):
    """Two processes turn the cache on as the CLI does: the first stores its compiled
    program, the second loads it (no new entry) and computes the same value."""
    import os
    import subprocess
    import sys

    cache = tmp_path / "cache"
    # the command line caches every program, not only those compiling for over a second
    # (JAX's default): this one compiles in milliseconds
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_PERSISTENT_CACHE")}
    env["JAXCAL_COMPILATION_CACHE"] = str(cache)
    code = (
        "from jaxcal.cli import enable_compilation_cache; print(enable_compilation_cache()); "
        "import jax, jax.numpy as jnp; "
        "print(float(jax.jit(lambda x: jnp.sum(jnp.sin(x) ** 2))(jnp.arange(5.0))))"
    )
    stale = cache / "jax" / ("0" * 16)  # the folder of another version of jaxcal's source
    stale.mkdir(parents=True)
    outputs = []
    for run in range(2):
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
        )
        assert out.returncode == 0, out.stderr[-3000:]
        outputs.append(out.stdout.split())
        folder = Path(outputs[-1][0])
        if run == 0:
            entries = sorted(p.name for p in folder.iterdir())
            assert entries, "no compiled program was cached"
    assert outputs[0] == outputs[1] and folder.parent == cache / "jax"
    assert sorted(p.name for p in folder.iterdir()) == entries  # loaded, not compiled
    assert not stale.exists()  # removed
