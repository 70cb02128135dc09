"""Tiers of compiled programs (``jaxcal._jit``): compiled fast first, promoted after
repeated calls (small inputs: LLVM's passes) or from the second call of a program with a
large input (XLA's default emitters), each tier stored on disk once.

Oracles: the first tier's output (the promoted program gives the same numbers to the last
bit or two: XLA fixes the order of reductions), the count of files in the cache, and the
tier a fresh function object finds on disk.
"""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcal import _jit


@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("JAXCAL_COMPILATION_CACHE", str(tmp_path / "programs"))
    monkeypatch.delenv("JAXCAL_XLA_DEFAULTS", raising=False)
    monkeypatch.setattr(_jit, "TIER_UP_CALLS", 3)
    return tmp_path / "programs"


def _entries(folder) -> int:
    return len(list(folder.glob("*.bin")))


def _tiers(f) -> list[str]:
    return [p.tier for p in f._programs.values()]


def logistic_terms(s, y):
    """Sums over the data with transcendental terms: what an optimised program may contract
    into fused multiply-adds."""
    z = 1.5 * s - 0.25
    return jnp.stack([jnp.sum(jnp.logaddexp(0.0, z) - y * z), jnp.sum(jax.nn.sigmoid(z) * s)])


def _data(n: int):
    rng = np.random.default_rng(0)
    s = rng.normal(size=n)
    return s, (rng.random(n) < 1 / (1 + np.exp(-s))).astype(np.float64)


def test_small_program_is_recompiled_optimised_after_the_threshold(cache):
    f = _jit.jit(logistic_terms)
    s, y = _data(1000)
    fast = np.asarray(f(s, y))
    assert _tiers(f) == ["classic-o0"] and _entries(cache) == 1
    f(s, y)
    _jit._wait_for_tier_ups()
    assert _tiers(f) == ["classic-o0"]  # 2 calls: below the threshold
    f(s, y)  # the third call starts the optimising compile
    _jit._wait_for_tier_ups()
    assert _tiers(f) == ["classic"] and _entries(cache) == 2
    optimised = np.asarray(f(s, y))
    np.testing.assert_array_max_ulp(optimised, fast, maxulp=2)
    size = f._cache_size()
    for _ in range(5):  # no further compile, nothing more stored
        f(s, y)
    _jit._wait_for_tier_ups()
    assert f._cache_size() == size and _entries(cache) == 2


def test_optimised_program_is_stored_once_and_loaded_first(cache):
    s, y = _data(1000)
    f = _jit.jit(logistic_terms)
    for _ in range(3):
        f(s, y)
    _jit._wait_for_tier_ups()
    stored = sorted(p.name for p in cache.glob("*.bin"))
    assert len(stored) == 2  # the first and the promoted tier
    # a new function object (as in a new process) loads the promoted program from disk
    g = _jit.jit(logistic_terms)
    out = g(s, y)
    assert _tiers(g) == ["classic"]
    for _ in range(5):
        g(s, y)
    _jit._wait_for_tier_ups()
    assert sorted(p.name for p in cache.glob("*.bin")) == stored
    np.testing.assert_array_equal(g(s, y), out)


def test_large_program_is_optimised_from_its_second_call(cache):
    n = _jit.SMALL_PROGRAM_ELEMENTS + 1
    s, y = _data(n)
    f = _jit.jit(logistic_terms)
    fast = np.asarray(f(s, y))
    assert _tiers(f) == ["classic"]  # LLVM's passes on, classic emitters
    f(s, y)
    _jit._wait_for_tier_ups()
    assert _tiers(f) == ["default"] and _entries(cache) == 2
    np.testing.assert_array_max_ulp(np.asarray(f(s, y)), fast, maxulp=2)


def test_tiers_of_a_calibrator_agree(cache):
    """The Gaussian fit + predict (solver, predict program) in both tiers: the same
    probabilities to the last bit or two."""
    import jaxcal

    s, y = _data(3000)
    fast = np.asarray(jaxcal.GaussianCalibration().fit(s, y).predict(s))
    for _ in range(3):
        jaxcal.GaussianCalibration().fit(s, y).predict(s)
    _jit._wait_for_tier_ups()
    from jaxcal.calibrators._linear import _predict_jit

    assert "classic" in _tiers(_predict_jit)
    optimised = np.asarray(jaxcal.GaussianCalibration().fit(s, y).predict(s))
    np.testing.assert_array_max_ulp(optimised, fast, maxulp=4)


def test_xla_defaults_have_one_tier(cache, monkeypatch):
    s, y = _data(1000)
    f = _jit.jit(logistic_terms, xla_defaults=True)
    for _ in range(4):
        f(s, y)
    _jit._wait_for_tier_ups()
    assert _tiers(f) == ["default"] and _entries(cache) == 1
    h = _jit.jit(logistic_terms, optimize=True)  # LLVM's passes at once: nothing to promote
    for _ in range(4):
        h(s, y)
    _jit._wait_for_tier_ups()
    assert _tiers(h) == ["classic"] and _entries(cache) == 2
    monkeypatch.setenv("JAXCAL_XLA_DEFAULTS", "1")
    g = _jit.jit(lambda s, y: logistic_terms(s, y) + 1)
    for _ in range(4):
        g(s, y)
    _jit._wait_for_tier_ups()
    assert _tiers(g) == ["default"]


def test_kernel_call_has_one_unoptimised_tier_at_every_size(cache):
    """A program declared as a compiled kernel's call keeps its first, fastest-compiling
    tier: no promotion after repeated calls, small or large, nothing more stored; its
    numbers are those of the other tiers to the last bit or two."""
    for n in (1000, _jit.SMALL_PROGRAM_ELEMENTS + 1):
        s, y = _data(n)
        stored = _entries(cache)
        f = _jit.jit(logistic_terms, kernel_call=True)
        out = np.asarray(f(s, y))
        for _ in range(5):
            f(s, y)
        _jit._wait_for_tier_ups()
        assert _tiers(f) == ["classic-o0"] and _entries(cache) == stored + 1
        g = _jit.jit(lambda s, y: logistic_terms(s, y))  # the plain tiers, promoted
        for _ in range(5):
            g(s, y)
        _jit._wait_for_tier_ups()
        assert _tiers(g) != ["classic-o0"]
        np.testing.assert_array_max_ulp(np.asarray(g(s, y)), out, maxulp=2)


def test_cache_off_compiles_by_size_only(monkeypatch):
    monkeypatch.setenv("JAXCAL_COMPILATION_CACHE", "0")
    monkeypatch.setattr(_jit, "TIER_UP_CALLS", 2)
    f = _jit.jit(logistic_terms)
    s, y = _data(1000)
    for _ in range(3):
        f(s, y)
    _jit._wait_for_tier_ups()
    assert set(f._jitted) == {(True, "classic-o0")} and not f._programs


SCRIPT = r"""
import sys
import numpy as np
import jax
from jaxcal import _jit
_jit.TIER_UP_CALLS = 2
f = _jit.jit(lambda x: jax.numpy.sum(jax.numpy.sin(x)))
x = np.linspace(0.0, 1.0, 100)
f(x)
f(x)  # starts an optimising compile; the interpreter exits right after
"""


def test_exit_waits_for_the_optimising_compile(tmp_path):
    env = {**os.environ, "JAXCAL_COMPILATION_CACHE": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert _entries(tmp_path) == 2  # the optimised program was stored before the exit
