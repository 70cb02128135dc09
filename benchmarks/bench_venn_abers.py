"""Venn-Abers predictors and calibration tests: jaxcal vs MAPIE, same data, same run, CPU.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_venn_abers.py
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_venn_abers.py --quick
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_venn_abers.py --x64

Measured (fit + predict, blocked with ``jax.block_until_ready``; progress on stderr):

1. IVAP with n = 1e4 and 1e5 calibration scores and as many test scores (drawn in float32,
   as a model's outputs are; MAPIE gets the same values): ``jaxcal.VennAbers().fit`` +
   ``predict`` (the merged probability) against MAPIE's
   ``VennAbersCalibrator(cv="prefit")`` ``fit`` + ``predict_proba(p0_p1_output=True)`` (with a
   prefitted estimator whose probability is the score). jaxcal's first call (compiling, with
   an empty compilation cache), a new size in the same bucket (99% of n: nothing compiles)
   and warm calls (median) are reported separately. Target: >= 5x (warm) at 1e5.
2. 1,000 groups x 1,000 scores: one ``fit_batch(..., group=...)`` + ``predict`` on
   ``[1000, 1000]`` test scores, against a Python loop of 1,000 MAPIE fits and predictions.
   Target: >= 50x.
3. Calibration tests: ``jaxcal.metrics.skce(estimator="linear")`` and ``spiegelhalter_z`` at
   n = 1e6 (target: under 1 s), and the unbiased SKCE with its resampling p-value at
   n = 2,000.

The largest difference between jaxcal's and MAPIE's p0, p1 and p (jaxcal's ``interval``,
outside the timing) is printed for every row.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import tempfile
import time
import warnings

import numpy as np

# an empty compilation cache: the first call compiles (set before jaxcal is imported)
os.environ["JAXCAL_COMPILATION_CACHE"] = tempfile.mkdtemp(prefix="jaxcal-bench-va-")


def _log(msg: str) -> None:
    from jaxcal._progress import log

    log(f"[bench_venn_abers] {msg}")


def _score_column():
    from sklearn.base import BaseEstimator, ClassifierMixin

    class ScoreColumn(ClassifierMixin, BaseEstimator):
        """A prefitted classifier whose probability of class 1 is the score itself."""

        def fit(self, X, y, sample_weight=None):
            self.classes_ = np.array([0, 1])
            self.n_features_in_ = 1
            return self

        def predict_proba(self, X):
            p = np.asarray(X)[:, 0]
            return np.c_[1 - p, p]

    return ScoreColumn().fit(np.zeros((2, 1)), np.array([0, 1]))


def _mapie(s, y, t):
    from mapie.calibration import VennAbersCalibrator

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # MAPIE's 0/0 slopes (NaN, then ignored)
        va = VennAbersCalibrator(estimator=_score_column(), cv="prefit").fit(s[:, None], y)
        p, p01 = va.predict_proba(t[:, None], p0_p1_output=True)
    return p[:, 1], p01


def _jaxcal(s, y, t):
    """fit + predict (the merged probability), as timed; and the fitted predictor."""
    import jax

    import jaxcal

    fitted = jaxcal.VennAbers().fit(s, y)
    return jax.block_until_ready(fitted.predict(t)), fitted


def _differences(s, t, lo, hi, p, p_ref, p01):
    """``(max |diff| of p0, p1, p where t <= max(s), test scores above max(s) where MAPIE's
    p1 is not 1)``. Above the largest calibration score the label-1 test point is the top
    point, so p1 = 1 (brute force and jaxcal agree); MAPIE 1.6.0 keeps the previous slope
    there when its loop meets an empty slice."""
    inside = t <= s.max()
    diff = max(
        np.abs(np.asarray(lo)[inside] - p01[inside, 0]).max(initial=0.0),
        np.abs(np.asarray(hi)[inside] - p01[inside, 1]).max(initial=0.0),
        np.abs(np.asarray(p)[inside] - p_ref[inside]).max(initial=0.0),
    )
    assert np.all(np.asarray(hi)[~inside] == 1.0)
    return diff, int(np.sum(p01[~inside, 1] != 1.0))


def _timed(fn, repeats):
    times = []
    out = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return out, statistics.median(times)


def _problem(rng, n):
    """Scores drawn in float32, as a model's outputs are (the same values go to MAPIE)."""
    s = rng.uniform(size=n).astype(np.float32)
    y = (rng.uniform(size=n) < s**1.3).astype(int)
    return s, y, rng.uniform(size=n).astype(np.float32)


def ivap(sizes, repeats):
    rng = np.random.default_rng(0)
    print("1. IVAP fit + predict, n calibration scores and n test scores")
    print(f"{'n':>8s} {'first':>9s} {'new n':>9s} {'warm':>9s} {'MAPIE':>9s} {'speed-up':>9s}"
          f" {'max |diff|':>11s} {'MAPIE p1 < 1 above max':>6s}")  # fmt: skip
    for n in sizes:
        s, y, t = _problem(rng, n)
        _log(f"IVAP n = {n:,}: jaxcal first call")
        t0 = time.perf_counter()
        _jaxcal(s, y, t)
        first = time.perf_counter() - t0
        m = n - n // 100  # same size bucket
        t0 = time.perf_counter()
        _jaxcal(s[:m], y[:m], t[:m])
        new = time.perf_counter() - t0
        _log(f"IVAP n = {n:,}: jaxcal warm x{repeats}")
        (p, fitted), warm = _timed(lambda: _jaxcal(s, y, t), repeats)  # noqa: B023
        _log(f"IVAP n = {n:,}: MAPIE x{repeats}")
        (p_ref, p01), theirs = _timed(lambda: _mapie(s, y, t), repeats)  # noqa: B023
        lo, hi = fitted.interval(t)
        diff, off = _differences(s, t, lo, hi, p, p_ref, p01)
        print(f"{n:>8,d} {first * 1e3:7.0f}ms {new * 1e3:7.1f}ms {warm * 1e3:7.1f}ms "
              f"{theirs * 1e3:7.0f}ms {theirs / warm:8.1f}x {diff:11.2e} {off:>6d}",
              flush=True)  # fmt: skip


def grouped(n_groups, per_group, repeats):
    import jax

    import jaxcal

    rng = np.random.default_rng(1)
    n = n_groups * per_group
    s, y, _ = _problem(rng, n)
    g = np.repeat(np.arange(n_groups), per_group)
    t = rng.uniform(size=(n_groups, per_group)).astype(np.float32)

    def ours():
        fitted = jaxcal.VennAbers().fit_batch(s, y, group=g)
        return jax.block_until_ready(fitted.predict(t)), fitted

    _log(f"groups {n_groups} x {per_group}: jaxcal first call")
    t0 = time.perf_counter()
    ours()
    first = time.perf_counter() - t0
    _log(f"groups: jaxcal warm x{repeats}")
    (p, fitted), warm = _timed(ours, repeats)
    lo, hi = (np.asarray(a) for a in fitted.interval(t))
    _log(f"groups: MAPIE loop of {n_groups} fits")
    t0 = time.perf_counter()
    refs = []
    for k in range(n_groups):
        rows = slice(k * per_group, (k + 1) * per_group)
        refs.append(_mapie(s[rows], y[rows], t[k]))
        if (k + 1) % max(1, n_groups // 5) == 0:
            _log(f"groups: MAPIE {k + 1}/{n_groups} [{time.perf_counter() - t0:.1f}s]")
    theirs = time.perf_counter() - t0
    diff, off = 0.0, 0
    for k, (p_ref, p01) in enumerate(refs):
        rows = slice(k * per_group, (k + 1) * per_group)
        d, o = _differences(s[rows], t[k], lo[k], hi[k], np.asarray(p[k]), p_ref, p01)
        diff, off = max(diff, d), off + o
    print(f"2. {n_groups:,} groups x {per_group:,} scores: jaxcal first {first:.2f} s, "
          f"warm {warm:.3f} s; MAPIE loop {theirs:.2f} s; speed-up {theirs / warm:.0f}x; "
          f"max |diff| {diff:.2e} (test scores above the largest calibration score where "
          f"MAPIE's p1 < 1: {off})", flush=True)  # fmt: skip


def tests(n_linear, n_unbiased, repeats):
    import jax

    import jaxcal

    rng = np.random.default_rng(2)
    p = rng.uniform(size=n_linear)
    y = (rng.uniform(size=n_linear) < p).astype(int)
    print("3. calibration tests (time per call, median after a first compiling call)")
    for name, fn in (
        (f"skce linear, n = {n_linear:,}", lambda: jaxcal.metrics.skce(p, y, estimator="linear")),
        (f"spiegelhalter_z, n = {n_linear:,}", lambda: jaxcal.metrics.spiegelhalter_z(p, y)),
        (
            f"skce unbiased + 200 resamples, n = {n_unbiased:,}",
            lambda: jaxcal.metrics.skce(
                p[:n_unbiased], y[:n_unbiased], key=jax.random.key(0), n_resamples=200
            ),
        ),
    ):
        _log(name)
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        first = time.perf_counter() - t0
        out, warm = _timed(lambda: jax.block_until_ready(fn()), repeats)  # noqa: B023
        stat, p_value = float(out[0]), float(out[1])
        print(f"   {name:<42s} first {first * 1e3:7.0f} ms, warm {warm * 1e3:8.1f} ms "
              f"(statistic {stat:+.2e}, p-value {p_value:.3f})", flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    ap.add_argument("--x64", action="store_true", help="float64 (default: JAX's float32)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", choices=("ivap", "groups", "tests"), default=None)
    args = ap.parse_args()

    import jax
    import mapie
    import sklearn

    if args.x64:
        jax.config.update("jax_enable_x64", True)
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        model = next(ln.split(":", 1)[1].strip() for ln in out.splitlines() if "Model name" in ln)
    except Exception:  # pragma: no cover - not Linux
        model = platform.processor()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    dtype = "float64" if args.x64 else "float32"
    print(f"machine: {model}, {os.cpu_count()} cores, load average {load:.1f}; jax "
          f"{jax.__version__} on {jax.devices()[0].platform}; mapie {mapie.__version__}, "
          f"scikit-learn {sklearn.__version__}; {dtype}")  # fmt: skip
    if args.only in (None, "ivap"):
        ivap((1_000, 10_000) if args.quick else (10_000, 100_000), args.repeats)
    if args.only in (None, "groups"):
        grouped(*((100, 1_000) if args.quick else (1_000, 1_000)), repeats=args.repeats)
    if args.only in (None, "tests"):
        tests(*((100_000, 500) if args.quick else (1_000_000, 2_000)), repeats=args.repeats)


if __name__ == "__main__":
    main()
