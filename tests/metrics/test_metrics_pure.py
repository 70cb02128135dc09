"""Every public metric composes as a JAX function: ``jit``, ``vmap``, ``grad``, ``jax.export``.

The oracles: the eager call (validated and padded on the host) for ``jit`` and ``export``, a
Python loop of eager calls for ``vmap``, central finite differences in float64 for ``grad``,
and the eager call's ``ValueError`` for the NaN policy (data the eager call refuses gives
NaN inside a trace). Outputs whose length depends on the data (``score_counts``,
``corp_reliability``) are compared through their real entries (:func:`_canon`).

The tests run with x64 on (``tests/conftest.py``).
"""

from __future__ import annotations

import dataclasses
import inspect
import types
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcal.metrics as M
from jaxcal.metrics import ranking

#: float64 agreement of the traced path with the eager one (same formulas, other
#: summation orders)
RTOL = 1e-10
ATOL = 1e-12
#: finite-difference step and tolerances (float64, central differences)
FD_EPS = 1e-6
FD_RTOL = 1e-6
FD_ATOL = 1e-8
N = 64
BATCH = 3
KEY = jax.random.key(7)


# ------------------------------------------------------------------------------ data


def _probs_data(seed: int):
    """Probabilities away from 0 and 1, labels from a miscalibrated truth (the smoothed
    residual changes sign), both classes, positive weights."""
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.02, 0.98, N)
    truth = 0.5 + 0.8 * (p - 0.5) + 0.15 * np.sin(6 * p)
    y = (rng.uniform(size=N) < truth).astype(np.float64)
    y[:2] = (0.0, 1.0)
    w = rng.uniform(0.5, 2.0, N)
    return p, y, w


def _tied_probs_data(seed: int):
    """:func:`_probs_data` rounded to two decimals: tied probabilities (counts, CORP)."""
    p, y, w = _probs_data(seed)
    return np.round(p, 2), y, w


def _grouped_data(seed: int):
    p, y, w = _probs_data(seed)
    rng = np.random.default_rng(seed + 100)
    groups = rng.integers(0, 3, N)
    return p, y, groups, w


def _fields_data(seed: int):
    p, y, w = _probs_data(seed)
    rng = np.random.default_rng(seed + 200)
    return p, y, rng.integers(0, 5, (N, 2)), w


def _ranking_data(seed: int):
    rng = np.random.default_rng(seed)
    shape = (6, 10)
    scores = rng.normal(size=shape)
    labels = (rng.uniform(size=shape) < 0.35).astype(np.float64)
    labels[:, :2] = (1.0, 0.0)
    mask = rng.uniform(size=shape) < 0.8
    mask[:, :2] = True
    return scores, labels, mask


def _ratings_data(seed: int):
    rng = np.random.default_rng(seed)
    users = rng.integers(0, 8, N)
    ratings = rng.integers(1, 6, N).astype(np.float64)
    predictions = ratings + rng.normal(size=N)
    predictions[::5] = np.round(predictions[::5])  # ties in the predictions
    return users, ratings, predictions, rng.uniform(0.5, 2.0, N)


def _rating_errors_data(seed: int):
    """``(predictions, ratings, weights)``: predictions never equal to a rating (the
    absolute error has a kink there)."""
    users, ratings, _, w = _ratings_data(seed)
    rng = np.random.default_rng(seed + 300)
    return ratings + rng.choice([-1.0, 1.0], N) * rng.uniform(0.1, 1.5, N), ratings, w


def _segments_data(seed: int):
    """:func:`_probs_data` and ``[4, N]`` boolean segment masks (overlapping)."""
    p, y, w = _probs_data(seed)
    rng = np.random.default_rng(seed + 400)
    group = rng.integers(0, 3, N)
    masks = np.stack([np.ones(N, bool), group == 0, group == 1, (group == 1) | (p > 0.5)])
    return p, y, w, masks


def _scores_data(seed: int):
    p, y, w = _tied_probs_data(seed)
    return 3.0 * p - 1.0, y, w


# ----------------------------------------------------------------------------- cases


@dataclasses.dataclass(frozen=True)
class Case:
    """One metric call: ``call(*arrays)`` with its options fixed."""

    id: str
    names: tuple[str, ...]  #: the public names of ``jaxcal.metrics`` it exercises
    call: Callable[..., Any]
    data: Callable[[int], tuple]
    #: ``(argument index, value)`` corruptions that the eager call refuses
    bad: tuple[tuple[int, float], ...] = ((0, np.nan), (0, 1.5), (1, 2.0))
    grad: bool = False  #: differentiable in its first argument
    export: bool = False


def _kw(fn, **options):
    def call(*arrays):
        return fn(*arrays, **options)

    return call


def _weighted(fn, **options):
    """``fn(probs, labels, sample_weight=w, **options)`` for data ``(p, y, w)``."""

    def call(p, y, w):
        return fn(p, y, sample_weight=w, **options)

    return call


def _with_groups(fn, **options):
    def call(p, y, g, w):
        return fn(p, y, g, sample_weight=w, **options)

    return call


def _with_segments(fn, **options):
    def call(p, y, w, masks):
        return fn(p, y, segments=masks, sample_weight=w, **options)

    return call


def _from_counts(fn, **options):
    def call(s, y, w):
        return fn(M.score_counts(s, y, w), **options)

    return call


PROBS_BAD = ((0, np.nan), (0, 1.5), (1, 2.0), (2, -1.0))
#: functions of tables and readable text, not of arrays: no traced path
HOST_ONLY = {"segment_masks", "segment_report"}
SCORE_BAD = ((0, np.nan), (0, np.inf), (1, 2.0), (2, -1.0))

CASES = [
    Case(
        "ece", ("ece",), _weighted(M.ece, n_bins=10), _probs_data, PROBS_BAD, grad=True, export=True
    ),
    Case(
        "ece-quantile",
        ("ece",),
        _weighted(M.ece, strategy="quantile"),
        _probs_data,
        PROBS_BAD,
        grad=True,
    ),
    Case(
        "mce",
        ("mce",),
        _weighted(M.mce, n_bins=8, min_fraction=0.05),
        _probs_data,
        PROBS_BAD,
        grad=True,
    ),
    Case(
        "mce-quantile",
        ("mce",),
        _weighted(M.mce, strategy="quantile", min_count=3),
        _probs_data,
        PROBS_BAD,
    ),
    Case("nll", ("nll",), _weighted(M.nll), _probs_data, PROBS_BAD, grad=True, export=True),
    Case("brier", ("brier",), _weighted(M.brier), _probs_data, PROBS_BAD, grad=True),
    Case(
        "reliability",
        ("reliability",),
        _weighted(M.reliability, n_bins=8, symmetric=True),
        _probs_data,
        PROBS_BAD,
    ),
    Case(
        "reliability-quantile",
        ("reliability",),
        _kw(M.reliability, n_bins=6, strategy="quantile"),
        lambda s: _probs_data(s)[:2],
        ((0, np.nan), (1, 0.5)),
    ),
    Case("auc", ("auc",), _weighted(M.auc), _scores_data, SCORE_BAD, export=True),
    Case("pcoc", ("pcoc",), _weighted(M.pcoc), _probs_data, PROBS_BAD, grad=True),
    Case("cal_n", ("cal_n",), _weighted(M.cal_n, n_bins=4), _probs_data, PROBS_BAD, grad=True),
    Case(
        "cal_n-uniform",
        ("cal_n",),
        _weighted(M.cal_n, n_bins=4, strategy="uniform"),
        _probs_data,
        PROBS_BAD,
    ),
    Case(
        "gc_n",
        ("gc_n",),
        _with_groups(M.gc_n, n_bins=3),
        _grouped_data,
        ((0, np.nan), (1, 2.0), (3, -1.0)),
    ),
    Case(
        "gc_n-uniform-count",
        ("gc_n",),
        _with_groups(M.gc_n, n_bins=2, strategy="uniform", group_weight="count"),
        _grouped_data,
        ((0, 1.5), (2, 0.5)),
    ),
    Case(
        "field_ece",
        ("field_ece",),
        _with_groups(M.field_ece),
        _fields_data,
        ((0, np.nan), (1, 2.0), (3, -1.0)),
        grad=True,
    ),
    Case(
        "field_ece-one",
        ("field_ece",),
        _with_groups(M.field_ece),
        _grouped_data,
        ((0, 1.5), (2, 0.5)),
    ),
    Case(
        "field_rce",
        ("field_rce",),
        _with_groups(M.field_rce, eps=1e-3),
        _fields_data,
        ((0, np.nan), (1, 2.0), (3, -1.0)),
        grad=True,
    ),
    Case(
        "debiased_ece",
        ("debiased_ece",),
        _weighted(M.debiased_ece, n_bins=5),
        _probs_data,
        PROBS_BAD,
        grad=True,
    ),
    Case(
        "debiased_ece-l1",
        ("debiased_ece",),
        _weighted(M.debiased_ece, n_bins=5, p=1, key=KEY, n_resamples=64),
        _probs_data,
        PROBS_BAD,
    ),
    Case(
        "smooth_ece",
        ("smooth_ece",),
        _weighted(M.smooth_ece, n_grid=201),
        _probs_data,
        PROBS_BAD,
        grad=True,
        export=True,
    ),
    Case(
        "smooth_ece-sigma",
        ("smooth_ece",),
        _weighted(M.smooth_ece, sigma=0.1, n_grid=201, return_sigma=True),
        _probs_data,
        PROBS_BAD,
        grad=True,
    ),
    Case(
        "skce",
        ("skce",),
        _weighted(M.skce, n_resamples=0),
        _probs_data,
        PROBS_BAD,
        grad=True,
        export=True,
    ),
    Case(
        "skce-resampled",
        ("skce",),
        _weighted(M.skce, key=KEY, n_resamples=50, kernel="gaussian"),
        _probs_data,
        PROBS_BAD,
    ),
    Case(
        "skce-linear",
        ("skce",),
        _weighted(M.skce, estimator="linear"),
        _probs_data,
        PROBS_BAD,
        grad=True,
    ),
    Case(
        "spiegelhalter_z",
        ("spiegelhalter_z",),
        _weighted(M.spiegelhalter_z),
        _probs_data,
        PROBS_BAD,
        grad=True,
    ),
    Case(
        "corp_decomposition",
        ("corp_decomposition",),
        _weighted(M.corp_decomposition, score="log"),
        _tied_probs_data,
        PROBS_BAD,
    ),
    Case(
        "corp_reliability",
        ("corp_reliability",),
        _weighted(M.corp_reliability, key=KEY, n_resamples=20),
        _tied_probs_data,
        PROBS_BAD,
    ),
    Case(
        "rating_mse",
        ("rating_mse",),
        lambda p, r, w: M.rating_mse(r, p, sample_weight=w),
        _rating_errors_data,
        ((0, np.nan), (1, np.inf), (2, -1.0)),
        grad=True,
    ),
    Case(
        "rating_mae",
        ("rating_mae",),
        lambda p, r, w: M.rating_mae(r, p, sample_weight=w),
        _rating_errors_data,
        ((0, np.nan), (1, np.inf), (2, -1.0)),
        grad=True,
    ),
    Case(
        "kendall_tau_per_user",
        ("kendall_tau_per_user",),
        lambda u, r, p: M.kendall_tau_per_user(u, r, p, n_users=9),
        lambda s: _ratings_data(s)[:3],
        ((0, -1.0), (1, np.nan), (2, np.inf)),
        export=True,
    ),
    Case(
        "ndcg_at_k",
        ("ndcg_at_k",),
        lambda s, y, m: M.ndcg_at_k(s, y, k=4, mask=m),
        _ranking_data,
        ((0, np.nan), (1, -1.0)),
        export=True,
    ),
    Case(
        "recall_at_k",
        ("recall_at_k",),
        lambda s, y, m: M.recall_at_k(s, y, k=3, mask=m, per_user=True),
        _ranking_data,
        ((0, np.inf), (1, 2.0)),
    ),
    Case(
        "ranking.auc",
        ("ranking.auc",),
        lambda s, y, m: ranking.auc(s, y, mask=m),
        _ranking_data,
        ((0, np.nan), (1, 2.0)),
    ),
    Case(
        "score_counts",
        ("score_counts",),
        lambda s, y, w: M.score_counts(s, y, w),
        _scores_data,
        ((0, np.nan), (1, 1.5), (2, -1.0)),
    ),
    Case(
        "auc_from_counts",
        ("score_counts", "auc_from_counts"),
        _from_counts(M.auc_from_counts),
        _scores_data,
        ((0, np.nan), (1, 1.5), (2, -1.0)),
        export=True,
    ),
    Case(
        "brier_from_counts",
        ("brier_from_counts",),
        _from_counts(M.brier_from_counts),
        _tied_probs_data,
        ((0, 1.5), (1, np.nan), (2, np.inf)),
    ),
    Case(
        "nll_from_counts",
        ("nll_from_counts",),
        _from_counts(M.nll_from_counts),
        _tied_probs_data,
        ((0, -0.5), (1, 1.5)),
    ),
    Case(
        "ece_from_counts",
        ("ece_from_counts",),
        _from_counts(M.ece_from_counts, n_bins=7, strategy="quantile"),
        _tied_probs_data,
        ((0, 1.5), (2, np.nan)),
    ),
    Case(
        "mce_from_counts",
        ("mce_from_counts",),
        _from_counts(M.mce_from_counts, n_bins=5, min_fraction=0.1),
        _tied_probs_data,
        ((0, 1.5), (1, -0.5)),
    ),
    Case("ecce", ("ecce",), _weighted(M.ecce), _probs_data, PROBS_BAD, grad=True, export=True),
    Case(
        "ecce-ties",
        ("ecce", "ecce_sigma", "ecce_pvalue"),
        _weighted(lambda *a, **k: tuple(f(*a, **k) for f in (M.ecce, M.ecce_sigma, M.ecce_pvalue))),
        _tied_probs_data,
        PROBS_BAD,
    ),
    Case("ecce_sigma", ("ecce_sigma",), _weighted(M.ecce_sigma), _probs_data, PROBS_BAD, grad=True),
    Case("ecce_pvalue", ("ecce_pvalue",), _weighted(M.ecce_pvalue), _probs_data, PROBS_BAD),
    Case(
        "multicalibration_error",
        ("multicalibration_error",),
        _with_segments(M.multicalibration_error),
        _segments_data,
        (*PROBS_BAD, (3, 0.5)),
        export=True,
    ),
]


def _canon(out: Any) -> list[np.ndarray]:
    """The leaves of an output as float64 NumPy arrays, padded entries dropped: a traced
    ``score_counts`` pads with count-0 entries, a traced ``corp_reliability`` with NaN
    forecasts."""
    if isinstance(out, M.ScoreCounts):
        real = np.asarray(out.count) > 0
        keep = [out.scores, out.count, out.weight, out.label_sum]
        return [np.asarray(a, np.float64)[real] for a in keep] + [
            np.asarray(out.label_variance, np.float64)
        ]
    if type(out).__name__ == "CorpReliability":
        real = ~np.isnan(np.asarray(out.forecast))
        return [np.asarray(a, np.float64)[real] for a in out]
    return [np.asarray(a, np.float64) for a in jax.tree.leaves(out)]


def _assert_same(a: Any, b: Any, *, rtol=RTOL, atol=ATOL) -> None:
    ca, cb = _canon(a), _canon(b)
    assert len(ca) == len(cb)
    for x, y in zip(ca, cb, strict=True):
        np.testing.assert_allclose(x, y, rtol=rtol, atol=atol)


def _stack(case: Case) -> tuple:
    rows = [case.data(seed) for seed in range(BATCH)]
    return tuple(np.stack(col) for col in zip(*rows, strict=True))


def _corrupt(arrays: tuple, index: int, value: float) -> tuple:
    out = list(arrays)
    a = np.array(out[index], dtype=np.float64 if np.isnan(value) or value % 1 else None)
    a.flat[0] = value
    out[index] = a
    return tuple(out)


def _ids(cases):
    return [c.id for c in cases]


# ----------------------------------------------------------------------------- tests


@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_jit_equals_eager(case):
    arrays = case.data(0)
    _assert_same(jax.jit(case.call)(*arrays), case.call(*arrays))


@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_vmap_equals_loop(case):
    batched = _stack(case)
    out = jax.vmap(case.call)(*batched)
    for b in range(BATCH):
        row = jax.tree.map(lambda a, b=b: a[b], out)
        _assert_same(row, case.call(*(a[b] for a in batched)))


@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_invalid_data_gives_nan_under_jit(case):
    """What the eager call refuses with a ``ValueError`` gives NaN in every floating-point
    output of the traced call (never a plausible number)."""
    for index, value in case.bad:
        arrays = _corrupt(case.data(0), index, value)
        with pytest.raises(ValueError):
            case.call(*arrays)
        out = jax.jit(case.call)(*arrays)
        floats = [
            np.asarray(a)
            for a in jax.tree.leaves(out)
            if jnp.issubdtype(jnp.asarray(a).dtype, jnp.floating)
        ]
        assert floats and all(np.isnan(a).all() for a in floats), (index, value, out)


def test_vmap_poisons_only_the_invalid_problem():
    p, y, w = (np.stack(c) for c in zip(*(_probs_data(s) for s in range(BATCH)), strict=True))
    p[1, 3] = np.nan
    out = np.asarray(jax.vmap(lambda p, y, w: M.ece(p, y, sample_weight=w))(p, y, w))
    assert np.isnan(out[1])
    for b in (0, 2):
        np.testing.assert_allclose(out[b], float(M.ece(p[b], y[b], sample_weight=w[b])), rtol=RTOL)


GRAD_CASES = [c for c in CASES if c.grad]


@pytest.mark.parametrize("case", GRAD_CASES, ids=_ids(GRAD_CASES))
def test_grad_matches_finite_differences(case):
    x, *rest = case.data(0)

    def f(x):
        leaves = jax.tree.leaves(case.call(x, *rest))
        return jnp.sum(leaves[0])  # the metric (the statistic of a test; summed over fields)

    g = np.asarray(jax.grad(f)(jnp.asarray(x)))
    assert np.all(np.isfinite(g))
    v = np.random.default_rng(3).normal(size=np.shape(x))
    jf = jax.jit(f)
    fd = (float(jf(x + FD_EPS * v)) - float(jf(x - FD_EPS * v))) / (2 * FD_EPS)
    np.testing.assert_allclose(float(g.ravel() @ v.ravel()), fd, rtol=FD_RTOL, atol=FD_ATOL)


def test_piecewise_constant_metrics_have_zero_gradient():
    """AUC and the ranking metrics depend on the scores through their order only."""
    s, y, w = _scores_data(0)
    g = jax.grad(lambda s: M.auc(s + 1e-3 * np.arange(N), y, sample_weight=w))(jnp.asarray(s))
    np.testing.assert_array_equal(np.asarray(g), 0.0)
    S, Y, m = _ranking_data(0)
    g = jax.grad(lambda S: M.ndcg_at_k(S, Y, k=4, mask=m))(jnp.asarray(S))
    np.testing.assert_array_equal(np.asarray(g), 0.0)


def test_smooth_ece_gradient_follows_the_fixed_point():
    """At the fixed-point bandwidth the gradient includes the bandwidth's own change
    (implicit function theorem): it differs from the gradient at that bandwidth held
    fixed, and the finite difference agrees with the former."""
    p, y, w = _probs_data(1)
    sigma = float(M.smooth_ece(p, y, sample_weight=w, n_grid=201))
    g_fixed_point = jax.grad(lambda p: M.smooth_ece(p, y, sample_weight=w, n_grid=201))(p)
    g_held = jax.grad(lambda p: M.smooth_ece(p, y, sample_weight=w, n_grid=201, sigma=sigma))(p)
    v = np.random.default_rng(4).normal(size=N)
    assert abs(float(g_fixed_point @ v) - float(g_held @ v)) > 1e-4 * abs(float(g_held @ v))


EXPORT_CASES = [c for c in CASES if c.export]


@pytest.mark.parametrize("case", EXPORT_CASES, ids=_ids(EXPORT_CASES))
def test_export_round_trip(case):
    arrays = case.data(0)

    def flat(*a):
        return jax.tree.leaves(case.call(*a))

    specs = [jax.ShapeDtypeStruct(np.shape(a), jnp.asarray(a).dtype) for a in arrays]
    exported = jax.export.export(jax.jit(flat))(*specs)
    restored = jax.export.deserialize(exported.serialize())
    out = restored.call(*arrays)
    want = _canon(case.call(*arrays))
    for x, y in zip(out, want, strict=True):
        np.testing.assert_allclose(np.asarray(x, np.float64), y, rtol=RTOL, atol=ATOL)


def test_second_jit_call_does_not_retrace(compiles):
    p, y, w = _probs_data(0)
    f = jax.jit(lambda p, y, w: M.ece(p, y, sample_weight=w))
    f(p, y, w)
    with compiles() as c:
        f(*_probs_data(1))
    assert c.count == 0


def test_static_errors_still_raise_under_jit():
    p, y, _ = _probs_data(0)
    with pytest.raises(ValueError, match="length mismatch"):
        jax.jit(M.ece)(p, y[:-1])
    with pytest.raises(ValueError, match="1-D"):
        jax.jit(M.brier)(p.reshape(8, 8), y.reshape(8, 8))
    with pytest.raises(ValueError, match="n_bins"):
        jax.jit(lambda p, y: M.ece(p, y, n_bins=0))(p, y)
    u, r, pred, _ = _ratings_data(0)
    with pytest.raises(ValueError, match="n_users"):
        jax.jit(M.kendall_tau_per_user)(u, r, pred)
    with pytest.raises(ValueError, match="number of bins"):
        jax.jit(lambda s, y: M.score_counts(s, y, bins=10))(p, y)
    with pytest.raises(ValueError, match="key"):
        jax.jit(lambda p, y: M.skce(p, y))(p, y)


# ------------------------------------------------------------------------- coverage


def _public_metric_functions() -> list[str]:
    names = []
    for name in M.__all__:
        obj = getattr(M, name)
        if isinstance(obj, types.ModuleType) or inspect.isclass(obj) or name in HOST_ONLY:
            continue
        names.append(name)
    top = {id(getattr(M, n)) for n in names}
    names += [f"ranking.{n}" for n in ranking.__all__ if id(getattr(ranking, n)) not in top]
    return names


def test_every_public_metric_is_covered():
    """A new public metric must join ``CASES`` (and so be checked under jit, vmap and the
    NaN policy)."""
    covered = {name for case in CASES for name in case.names}
    missing = [name for name in _public_metric_functions() if name not in covered]
    assert not missing, f"public metrics without a case in CASES: {missing}"
