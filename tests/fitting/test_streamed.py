"""Parametric calibrators fitted on chunks (``fit_chunks``), in one process or several, equal
their in-memory fit on the concatenated rows (the oracle), to float64 rounding."""

from __future__ import annotations

import json
import warnings

import jax
import numpy as np
import pytest

import jaxcal
from jaxcal.calibrators._scaling import fit_scaling
from tests._multiprocess import run_processes

RTOL = 1e-10  # float64: the same optimum, sums in another order
ATOL = 1e-12  # coefficients pinned at 0 by an active constraint
N = 400  # rows: the in-memory oracles are the programs of tests/calibrators (bucket 512)
CALIBRATORS = {
    "PlattScaling": ("normal", "ips"),
    "TemperatureScaling": ("normal", "ips_positive"),
    "BetaCalibration": ("unit", "snips"),
    "GaussianCalibration": ("normal", "snips"),
    "GammaCalibration": ("positive", "ips_positive"),
    "ExponentialCalibration": ("positive", "snips"),
}


def _data(kind: str, n: int, seed: int):
    """Scores in the calibrator's domain (classes of unequal spread, so that the Gaussian,
    Gamma and beta maps meet their monotonicity constraint), weights (some 0) and
    propensities."""
    rng = np.random.default_rng(seed)
    y = (rng.uniform(size=n) < 0.35).astype(np.int64)
    s = np.where(y == 1, rng.normal(1.0, 0.6, n), rng.normal(0.0, 1.3, n))
    if kind == "unit":
        s = 1 / (1 + np.exp(-s))
    elif kind == "positive":
        s = np.exp(s)
    w = rng.uniform(0.2, 2.0, n)
    w[::13] = 0.0
    omega = rng.uniform(0.3, 1.0, n)
    return s, y, w, omega


def _chunks(n: int, seed: int, *arrays):
    """Uneven chunks of the rows (an empty one and a single row among them)."""
    cuts = np.sort(np.random.default_rng(seed).choice(np.arange(2, n - 1), 4, replace=False))
    cuts = np.concatenate([[0, 0, 1], cuts, [n]])
    return [tuple(a[i:j] for a in arrays) for i, j in zip(cuts[:-1], cuts[1:], strict=True)]


def _assert_same(got, ref):
    assert type(got) is type(ref)
    np.testing.assert_allclose(got.theta, ref.theta, rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(got.context.lo, ref.context.lo)
    np.testing.assert_array_equal(got.context.hi, ref.context.hi)
    np.testing.assert_array_equal(got.scaling.shift, ref.scaling.shift)
    np.testing.assert_array_equal(got.scaling.exponent, ref.scaling.exponent)
    np.testing.assert_array_equal(got.status.active, ref.status.active)
    assert int(got.status.code) == int(ref.status.code)
    np.testing.assert_allclose(got.status.objective, ref.status.objective, rtol=RTOL)
    np.testing.assert_allclose(got.status.multipliers, ref.status.multipliers, atol=1e-9)


@pytest.mark.parametrize("name", list(CALIBRATORS))
def test_each_calibrator_equals_its_in_memory_fit(name):
    kind, loss = CALIBRATORS[name]
    s, y, w, omega = _data(kind, N, seed=1)
    cal = getattr(jaxcal, name)()
    ref = cal.fit(s, y, sample_weight=w)
    _assert_same(cal.fit_chunks(_chunks(N, 2, s, y, w)), ref)
    # propensities in the chunks, with the calibrator's loss weighting
    ref = cal.fit(s, y, sample_weight=w, propensity=omega, loss=loss)
    _assert_same(cal.fit_chunks(_chunks(N, 3, s, y, w, omega), loss=loss), ref)


def test_constraints_penalty_and_every_loss():
    """An active constraint of Platt scaling (scores anti-correlated with the labels), a
    penalty, and every loss weighting."""
    s, y, w, omega = _data("normal", N, seed=4)
    cases = [
        (jaxcal.PlattScaling(), -s, {}),
        (jaxcal.PlattScaling(l2=3.0, tol=1e-20), s, {"propensity": omega, "loss": "naive"}),
        (jaxcal.GaussianCalibration(l2=0.5), s, {"propensity": omega, "loss": "ips"}),
    ]
    for cal, scores, kw in cases:
        ref = cal.fit(scores, y, sample_weight=w, **kw)
        columns = (scores, y, w) + ((kw["propensity"],) if kw else ())
        _assert_same(cal.fit_chunks(_chunks(N, 5, *columns), loss=kw.get("loss", "naive")), ref)
    assert bool(jaxcal.PlattScaling().fit_chunks([(-s, y)]).status.active[0])


def test_the_restart_and_the_enumeration_of_active_sets():
    """Two small Gaussian problems that take the in-memory search's rare stages: one whose
    unconstrained fit runs off (tests/calibrators/test_solver_restart.py), so Newton on the
    violated face diverges from it and runs again from the intercept-only start; and one
    whose violated face fails the KKT test, so every active set is tried (both rows active
    win)."""
    s12 = np.array(
        [-2.167, -1.239, -1.088, -1.069, -1.056, -0.918, 0.328, 0.461, 0.735, 1.264, 1.577, 2.584]
    )
    y12 = np.array([0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0])
    rng = np.random.default_rng(3)
    y20 = (rng.uniform(size=20) < 0.4).astype(np.int64)
    s20 = rng.normal(size=20) * rng.uniform(0.3, 3, 20) + 0.5 * y20 * rng.choice([-1, 1])
    cal = jaxcal.GaussianCalibration()
    for s, y, active in ((s12, y12, [False, True]), (s20, y20, [True, True])):
        ref = cal.fit(s, y)
        assert np.asarray(ref.status.active).tolist() == active
        _assert_same(cal.fit_chunks([(s[:7], y[:7]), (s[7:], y[7:])]), ref)


def test_sources_mappings_and_passes():
    """A callable source (called once per pass), mappings and ``None`` weights give the same
    fit as a list of tuples."""
    s, y, _, _ = _data("normal", N, seed=6)
    parts = _chunks(N, 7, s, y)
    ref = jaxcal.GaussianCalibration().fit(s, y)
    calls = []

    def source():
        calls.append(1)
        return iter([{"scores": a, "labels": b} if k % 2 else (a, b, None) for k, (a, b) in
                     enumerate(parts)])  # fmt: skip

    got = jaxcal.GaussianCalibration().fit_chunks(source)
    _assert_same(got, ref)
    n_newton = int(got.status.n_iter)
    assert len(calls) >= 4 + n_newton  # scan, two moments, start, each accepted step


def test_new_chunk_sizes_and_hyperparameters_compile_nothing(compiles):
    s, y, w, _ = _data("normal", N, seed=8)
    jaxcal.PlattScaling().fit_chunks([(s[:600], y[:600]), (s[600:900], y[600:900])])
    with compiles() as c:  # the largest chunk in 513..1024 rows: the first fit's bucket
        cal = jaxcal.PlattScaling(l2=0.3, max_iter=40, tol=1e-16)
        fit = cal.fit_chunks([(s[:700], y[:700], w[:700]), (s[700:], y[700:], w[700:])])
        jax.block_until_ready(fit.theta)
    assert c.count == 0
    ref = cal.fit(s, y, sample_weight=w)
    np.testing.assert_allclose(fit.theta, ref.theta, rtol=RTOL)


def test_bad_sources_and_chunks_are_named():
    s, y, _, _ = _data("normal", 200, seed=9)
    good = (s[:100], y[:100])
    cal = jaxcal.PlattScaling()
    cases = [
        ([good, (s[100:], y[100:] + 2)], r"labels of chunk 1 must be 0/1"),
        ([good, (np.r_[s[100:150], np.nan], y[100:151])], r"scores of chunk 1 contain 1 non"),
        ([good, (s[100:], y[100:150])], r"length mismatch: 100 scores but 50 labels of chunk 1"),
        (
            [good, (np.c_[s[100:], s[100:]], y[100:])],
            r"scores of chunk 1 must be 1-D .* \(100, 2\)",
        ),
        ([good, (s[100:], y[100:], -np.ones(100))], r"sample_weight of chunk 1 must be non-neg"),
        ([good, s[100:]], r"chunk 1 of the source is ndarray, not a \(scores, labels"),
        ([good, {"scores": s, "label": y}], r"chunk 1 of the source: a mapping needs the keys"),
        ((s, y), r"chunk 0 of the source is ndarray"),
        ([], r"the source returned no rows"),
        (lambda: iter([]), r"the source returned no rows"),
        ([(s[:0], y[:0])], r"the source returned no rows"),
        (lambda: 3, r"must return an iterator of .* chunks; got int"),
        (iter([good]), r"iterator, which can be read only once"),
        (s, r"the source must be a list of .* chunks or a zero-argument callable"),
        ([(s, np.zeros(200))], r"only one class \(all 0"),
        ([(s, y, np.zeros(200))], r"sample_weight is zero on every row"),
        ([good], r'loss="snips" needs per-row propensities, but chunk 0 has none'),
        ([good + (None, np.full(100, 2.0))], r"propensity of chunk 0 must be <= 1"),
    ]
    for source, match in cases:
        loss = "snips" if "snips" in match or "propensity" in match else "naive"
        with pytest.raises(ValueError, match=match):
            cal.fit_chunks(source, loss=loss)
    with pytest.raises(ValueError, match=r"loss must be one of"):
        cal.fit_chunks([good], loss="dr")
    with pytest.raises(ValueError, match=r"method='discriminative' only"):
        jaxcal.GaussianCalibration(method="generative").fit_chunks([good])
    with pytest.raises(ValueError, match=r"all training scores are equal"):
        cal.fit_chunks([(np.ones(4), np.array([0, 1, 0, 1]))])
    with pytest.raises(ValueError, match=r"l2 must be"):
        jaxcal.PlattScaling(l2=-1.0).fit_chunks([good])


def test_a_source_that_changes_between_passes_is_refused():
    s, y, _, _ = _data("normal", 300, seed=10)
    calls = []

    def source():
        calls.append(1)
        n = 300 if len(calls) == 1 else 200
        return iter([(s[:n], y[:n])])

    with pytest.raises(ValueError, match=r"returned 200 rows on pass 1 but 300 on the first"):
        jaxcal.PlattScaling().fit_chunks(source)


def test_float32_streamed_fit_shifts_scores_as_fit_does():
    """x64 off, scores ``s + 1e8`` (float32's spacing there is 8): the streamed fit shifts
    them exactly as ``fit`` does, and both predict what a float64 fit of ``s`` predicts."""
    s, y, _, _ = _data("normal", N, seed=11)
    big = 100.0 * s + 1e8
    with jax.enable_x64(False), warnings.catch_warnings():
        warnings.simplefilter("ignore", jaxcal.calibrators.PrecisionWarning)
        # the transform fit(big, y) chooses (PlattScaling: shift- and scale-equivariant)
        ref, _ = fit_scaling(big, np.ones(N), shift=True, need_spread=True, what="fit")
        got = jaxcal.PlattScaling().fit_chunks(_chunks(N, 12, big, y))
        assert got.theta.dtype == np.float32
        np.testing.assert_array_equal(got.scaling.shift, ref.shift)
        np.testing.assert_array_equal(got.scaling.exponent, ref.exponent)
        assert float(ref.shift) > 0  # the scores were shifted
        p32 = np.asarray(got.predict(big[:50]))
    p64 = np.asarray(jaxcal.PlattScaling().fit(s, y).predict(s[:50]))
    np.testing.assert_allclose(p32, p64, atol=1e-5)


_PROCESS_FIT = """
import json
import numpy as np
import jaxcal
data = np.load({path!r})
owner = {owner!r}
mine = [tuple(data[f"{{c}}{{k}}"] for c in "sywo") for k in range(len(owner)) if owner[k] == PID]
fit = jaxcal.GaussianCalibration().fit_chunks(lambda: iter(mine), loss="snips")
out = {{"theta": np.asarray(fit.theta).tolist(), "active": np.asarray(fit.status.active).tolist(),
        "lo": float(fit.context.lo), "hi": float(fit.context.hi)}}
bad = mine if PID != 1 else [(np.array([0.5, np.nan]), np.array([0, 1]))]
try:
    jaxcal.GaussianCalibration().fit_chunks(bad)
except ValueError as exc:
    out["error"] = str(exc)
print(json.dumps(out))
"""


@pytest.mark.parametrize("n", [4])  # 2 processes: the click models' and counts' tests
def test_processes_with_their_own_chunks_equal_one_in_memory_fit(tmp_path, n):
    s, y, w, omega = _data("normal", N, seed=13)
    parts = _chunks(N, 14, s, y, w, omega)
    path = str(tmp_path / "chunks.npz")
    np.savez(
        path,
        **{f"{c}{k}": a for k, part in enumerate(parts) for c, a in zip("sywo", part, strict=True)},
    )
    # chunk k belongs to process k % n; with 4 processes the last one holds no chunk
    owner = [k % n if n == 2 else k % 3 for k in range(len(parts))]
    outs = [json.loads(o) for o in run_processes(_PROCESS_FIT.format(path=path, owner=owner), n)]
    ref = jaxcal.GaussianCalibration().fit(s, y, sample_weight=w, propensity=omega, loss="snips")
    for pid, out in enumerate(outs):
        assert out["theta"] == outs[0]["theta"]  # the same bits on every process
        assert out["active"] == np.asarray(ref.status.active).tolist()
        assert (out["lo"], out["hi"]) == (float(ref.context.lo), float(ref.context.hi))
        # an error on one process is raised on every process (none waits for the others)
        assert ("scores of chunk 0" if pid == 1 else "1 process(es) failed") in out["error"]
    np.testing.assert_allclose(outs[0]["theta"], ref.theta, rtol=RTOL, atol=ATOL)
