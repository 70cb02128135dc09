"""Test configuration: float64 everywhere (oracle comparisons at ~1e-10), real-data paths."""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
import threading
from pathlib import Path

# Most of the suite's time is XLA compiling small programs; the tests compile them without
# LLVM's optimisation passes and with XLA's classic CPU emitters, as jaxcal compiles its own
# small programs (jaxcal/_jit.py): 2-3x faster compiles of the same programs, whose results
# agree to the last bit or two. Set before JAX starts its backend; subprocesses inherit it.
_FAST_COMPILE_FLAGS = ("--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false")
_xla_flags = os.environ.get("XLA_FLAGS", "")
os.environ["XLA_FLAGS"] = " ".join(
    [_xla_flags, *(f for f in _FAST_COMPILE_FLAGS if f.split("=")[0] not in _xla_flags)]
).strip()

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", True)
# CLI tests must not write to the user's compilation cache (or time a warm one)
os.environ.setdefault("JAXCAL_COMPILATION_CACHE", "0")

# The xdist workers of one run share a throw-away persistent compilation cache, so a program
# that both compile (metrics, isotonic, solvers reached from several test files) compiles
# once. The controller makes the folder before the workers start and deletes it at the end;
# only programs that take >= 0.5 s to compile are stored.
_SHARED_CACHE = os.environ.get("JAXCAL_TEST_XLA_CACHE")
if _SHARED_CACHE and os.environ.get("PYTEST_XDIST_WORKER"):
    jax.config.update("jax_compilation_cache_dir", _SHARED_CACHE)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)


def pytest_configure(config):
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        config._jaxcal_xla_cache = tempfile.mkdtemp(prefix="jaxcal-test-xla-")
        os.environ["JAXCAL_TEST_XLA_CACHE"] = config._jaxcal_xla_cache


# The test files that take the longest (half a minute or more of one worker), longest first.
# pytest-xdist's `--dist loadfile` hands whole files to the workers in collection order, so
# starting these first keeps one of them from running alone at the end
# (longest-processing-time-first scheduling).
LONG_FILES = (
    "tests/test_docs_reference.py",
    "tests/test_docs_examples.py",
    "tests/bayes/test_scoremodel_bayes.py",
    "tests/calibrators/test_pav_native.py",
    "tests/bayes/test_shapes_bayes.py",
    "tests/test_docstring_examples.py",
    "tests/bayes/test_bayes_inference.py",
    "tests/reproduce/test_kweon2022.py",
    "tests/calibrators/test_shapes_nonparametric.py",
    "tests/test_compilation_cache.py",
    "tests/recsys/test_sweep.py",
    "tests/clicks/test_recovery.py",
    "tests/clicks/test_fitting.py",
    "tests/calibrators/test_parametric.py",
    "tests/recsys/test_cmtrf.py",
    "tests/reproduce/test_hiranandani2019.py",
    "tests/recsys/test_cmtrf_core.py",
    "tests/recsys/test_cmtrf_kernel.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONG_FILES)}
    root = Path(__file__).resolve().parents[1]

    def key(item):
        path = Path(str(item.path)).resolve()
        name = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
        return rank.get(name, len(LONG_FILES))

    items.sort(key=key)  # stable: the order within a file and of the other files is kept


def pytest_unconfigure(config):
    folder = getattr(config, "_jaxcal_xla_cache", None)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)


# Every program JAX traces fires the trace event once, and every program XLA compiles (not
# loaded from a cache) fires the backend-compile event once; the `compiles` fixture counts
# both, so tests can assert that a call neither traced nor compiled anything new (a program
# that traces nothing new but compiles again, e.g. an executable dropped from a cache, counts).
_TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
_BACKEND_EVENT = "/jax/core/compile/backend_compile_duration"
_EVENTS = {_TRACE_EVENT: [0], _BACKEND_EVENT: [0]}


def _on_duration_event(name, *args, **kwargs):
    # a program that jaxcal recompiles optimised in the background (jaxcal/_jit.py's tiers)
    # is not a compile of the call being counted
    if name in _EVENTS and threading.current_thread().name != "jaxcal-tier-up":
        _EVENTS[name][0] += 1


jax.monitoring.register_event_duration_secs_listener(_on_duration_event)


class CompileCounter:
    """``with compiles() as c: ...`` then ``c.count``: programs traced plus programs compiled
    by XLA inside the block (``c.traces`` and ``c.backend_compiles`` apart; jitted functions
    and eager operations on new shapes alike)."""

    def __enter__(self):
        self._start = {k: v[0] for k, v in _EVENTS.items()}
        self.traces = self.backend_compiles = self.count = 0
        return self

    def __exit__(self, *exc):
        self.traces = _EVENTS[_TRACE_EVENT][0] - self._start[_TRACE_EVENT]
        self.backend_compiles = _EVENTS[_BACKEND_EVENT][0] - self._start[_BACKEND_EVENT]
        self.count = self.traces + self.backend_compiles
        return False


@pytest.fixture
def compiles():
    """Factory of :class:`CompileCounter` context managers."""
    return CompileCounter


# Every program XLA compiles for the CPU maps its code into memory (about 19 mappings each),
# and Linux allows a process 65,530 mappings (vm.max_map_count): a worker that keeps the
# programs of a thousand tests alive runs out, and LLVM aborts the next compile ("Unable to
# allocate section memory"). Past a third of the limit, a test's teardown drops JAX's
# compiled programs (later tests recompile theirs, or load them from the shared cache).
def _mapping_limit() -> int:
    try:
        with open("/proc/sys/vm/max_map_count") as fh:
            return int(fh.read())
    except (OSError, ValueError):
        return 65_530


_MAPPINGS_BEFORE_CLEARING = _mapping_limit() // 3


def _mappings() -> int:
    try:
        with open("/proc/self/maps", "rb") as fh:
            return fh.read().count(b"\n")
    except OSError:  # not Linux
        return 0


@pytest.fixture(autouse=True)
def _release_compiled_programs():
    yield
    if _mappings() > _MAPPINGS_BEFORE_CLEARING:
        jax.clear_caches()
        gc.collect()


# Named tolerances (see docs/STYLE): float64 oracle comparisons, float32 paths.
RTOL64 = 1e-10
RTOL32 = 1e-5


def _data_dir() -> Path:
    env = os.environ.get("JAXCAL_DATA_DIR")
    if env:
        return Path(env)
    return (Path(__file__).resolve().parents[1] / ".." / "shared" / "data").resolve()


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The shared real data (Coat, TianGong-ST demo); skips where it is absent."""
    d = _data_dir()
    if not d.is_dir():
        pytest.skip(f"shared data not found at {d} (set JAXCAL_DATA_DIR)")
    return d
