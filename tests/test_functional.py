"""jaxcal composes as a JAX library: every public calibrator's fit runs inside ``jit``,
``vmap``, ``grad`` and ``jax.export``, and gives the eager estimator's numbers.

The per-calibrator files (``tests/calibrators/test_pure_*.py``) test each map in depth
(``vmap`` against loops, finite differences, active constraints, export, the NaN policy,
options); this file walks the whole public surface, so that a calibrator added later
without a pure fit, or without those tests, fails here.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import jaxcal
from jaxcal import functional as F
from jaxcal.calibrators._base import FittedCalibrator

# the estimators (not their fitted types, which jaxcal exports too)
CALIBRATORS = sorted(
    n
    for n in jaxcal.__all__
    if inspect.isclass(getattr(jaxcal, n))
    and not issubclass(getattr(jaxcal, n), FittedCalibrator)
    and n != "NeuralCalibration"
)
_SCORES_IN_01 = {"BetaCalibration", "BBQ", "HistogramBinning"}
_POSITIVE_SCORES = {"GammaCalibration", "ExponentialCalibration"}


def _problem(name, n=400, seed=0):
    rng = np.random.default_rng(seed)
    s = rng.normal(size=n)
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-2 * s))).astype(float)
    y[:2] = (0.0, 1.0)
    if name in _SCORES_IN_01:
        s = 1 / (1 + np.exp(-s))
    elif name in _POSITIVE_SCORES:
        s = np.exp(s)
    return s, y


def _grid(s):
    return np.linspace(np.min(s), np.max(s), 33)


@pytest.mark.parametrize("name", CALIBRATORS)
def test_pure_fit_is_the_eager_fit_and_exports(name):
    """``jit`` of ``functional.fit`` + ``predict`` equals the eager estimator, returns its
    type, and the same program exports, serialises and runs after deserialisation."""
    s, y = _problem(name)
    cal = getattr(jaxcal, name)()
    grid = _grid(s)
    eager = np.asarray(cal.fit(s, y).predict(grid))
    program = jax.jit(lambda s, y: F.predict(F.fit(cal, s, y), grid))
    np.testing.assert_allclose(np.asarray(program(s, y)), eager, rtol=1e-6, atol=1e-8)
    assert type(jax.eval_shape(lambda s, y: F.fit(cal, s, y), s, y)) is type(cal.fit(s, y))
    again = jax.export.deserialize(jax.export.export(program)(s, y).serialize())
    np.testing.assert_allclose(np.asarray(again.call(s, y)), eager, rtol=1e-6, atol=1e-8)


_PURE_TEST_FILES = sorted((Path(__file__).parent / "calibrators").glob("test_pure_*.py"))
_COMPOSITION_WORDS = ("vmap", "jvp", "export", "nan")


@pytest.mark.parametrize("name", [*CALIBRATORS, "NeuralCalibration"])
def test_every_public_calibrator_has_in_depth_composition_tests(name):
    """Each public calibrator is named in a ``tests/calibrators/test_pure_*.py`` file that
    tests ``vmap``, derivatives, export and the NaN policy (this walk fails for a new
    calibrator until it has them)."""
    sources = [p.read_text() for p in _PURE_TEST_FILES]
    covering = [src for src in sources if name in src]
    assert covering, f"{name} has no tests/calibrators/test_pure_*.py file"
    text = "\n".join(covering)
    missing = [w for w in _COMPOSITION_WORDS if w not in text]
    assert not missing, f"{name}'s pure-fit tests lack {missing}"


def test_the_five_calls_of_a_new_user():
    """The calls a new user tries first, verbatim (float32, as JAX's default)."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 200).astype(np.float32)
    s = rng.normal(y, 1.0).astype(np.float32)
    S, Y = np.stack([s, s + 1]), np.stack([y, y])
    x, t = s, np.ones_like(y)

    p = jax.jit(lambda s, y: jaxcal.PlattScaling().fit(s, y).predict(s))(s, y)
    eager = np.asarray(jaxcal.PlattScaling().fit(s, y).predict(s))
    # the traced fit solves in float32 (the scores' dtype) to the solver's float32 default
    # tolerance (a Newton decrement of 1e-9 per unit weight: coefficients to ~1e-4), the
    # eager one in float64 (x64 is on in the tests)
    np.testing.assert_allclose(np.asarray(p), eager, rtol=1e-3)

    P = jax.vmap(lambda s, y: jaxcal.PlattScaling().fit(s, y).predict(s))(S, Y)
    np.testing.assert_allclose(np.asarray(P[0]), np.asarray(p), rtol=1e-6)

    g = jax.grad(lambda s: jaxcal.IsotonicCalibration().fit(s, y).predict(s).sum())(s)
    assert g.shape == s.shape and np.all(np.isfinite(np.asarray(g)))

    fitted, tangent = jax.jvp(lambda y: jaxcal.isotonic_regression(x, y), (y,), (t,))
    # a constant shift of every target shifts every block average by the same constant
    np.testing.assert_allclose(np.asarray(tangent), 1.0, rtol=1e-6)

    exp = jax.export.export(jax.jit(lambda y: jaxcal.isotonic_regression(x, y)))(y)
    again = jax.export.deserialize(exp.serialize())
    np.testing.assert_allclose(np.asarray(again.call(y)), np.asarray(fitted), rtol=1e-6)


_SHARDED = """
import jax, numpy as np, jaxcal
from jax.sharding import Mesh, PartitionSpec as P
jax.config.update("jax_enable_x64", True)
assert jax.device_count() == 4, jax.devices()
rng = np.random.default_rng(0)
Y = rng.integers(0, 2, (8, {n})).astype(float)
S = rng.normal(1.2 * Y, 1.0)
grid = np.linspace(-3.0, 4.0, 17)
mesh = Mesh(np.array(jax.devices()), ("d",))
for cal in ({calibrators},):
    def rows(s, y, cal=cal):
        return jax.vmap(lambda s, y: cal.fit(s, y).predict(grid))(s, y)
    spec = (P("d"), P("d"))
    sharded = jax.jit(jax.shard_map(rows, mesh=mesh, in_specs=spec, out_specs=P("d")))
    got = np.asarray(sharded(S, Y))
    loop = np.stack([np.asarray(cal.fit(s, y).predict(grid)) for s, y in zip(S, Y)])
    # the eager fits solve the same problems by other code (host sorts, compiled kernels)
    np.testing.assert_allclose(got, loop, rtol=1e-6, atol=1e-8)
print("OK")
"""


def _run_on_four_devices(script: str) -> None:
    """Run ``script`` in a fresh process with 4 CPU devices (the device count is fixed when
    JAX starts) and check that it printed OK."""
    env = dict(os.environ)
    flags = env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
    env["XLA_FLAGS"], env["JAX_PLATFORMS"] = flags.strip(), "cpu"
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("OK")


def test_pure_fits_under_shard_map_on_four_devices():
    """Problems sharded over 4 CPU devices with ``shard_map`` (each device fits its rows with
    the pure fit under ``vmap``, loop carries marked varying) equal a loop of eager fits."""
    calibrators = (
        "jaxcal.PlattScaling(), jaxcal.GaussianCalibration(), jaxcal.IsotonicCalibration(), "
        "jaxcal.HistogramBinning(), jaxcal.ENIR()"
    )
    _run_on_four_devices(_SHARDED.format(n=300, calibrators=calibrators))


def test_venn_abers_and_spline_fits_under_shard_map_on_four_devices():
    """The same for the Venn-Abers predictors (their sweeps' and lookups' carries) and spline
    calibration (its batched Newton solve over penalties x folds: 85 systems per problem,
    170 per device, solved in JAX; LAPACK's batched Cholesky waits on the CPU thread pool
    and hung with as many devices as pool threads)."""
    calibrators = "jaxcal.VennAbers(), jaxcal.VennAbers(n_folds=3), jaxcal.SplineCalibration()"
    _run_on_four_devices(_SHARDED.format(n=100, calibrators=calibrators))
