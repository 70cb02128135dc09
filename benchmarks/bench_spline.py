"""Spline calibration: jaxcal vs ml-insights' SplineCalib, same data, same run, CPU.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_spline.py
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_spline.py --quick

ml-insights is a benchmark peer only, not a dependency of jaxcal: install it into the
environment with ``pip install ml-insights`` (version 1.1.0 pulls in only ``splinecalib``
0.0.13, whose ``SplineCalib`` it re-exports; it builds a small Cython extension).

Measured (fit + predict on the training probabilities, blocked with
``jax.block_until_ready``; progress on stderr), n = 1e4 and 1e5 model probabilities with
labels from a known non-linear calibration curve:

* ``jaxcal.SplineCalibration(on="logit")`` with its defaults: 30 knots at quantiles of
  logit(p), 17 penalties, 5-fold cross-validation of every (penalty, fold) pair (85 exact
  Newton fits in one compiled solve), then the refit. The first call (compiling, with an
  empty compilation cache), a new size in the same bucket (99% of n: nothing compiles) and
  warm calls (median, interleaved with the peer's) are reported separately.
* ``ml_insights.SplineCalib()`` with its defaults: 30 sampled knots plus 9 fixed ones on
  the log-odds scale, a ridge on the coefficients, 17 penalties, ``param_search_mode=
  "fast"`` (one fold of 5 is held out per penalty: 17 L-BFGS fits) plus a final fit, then
  ``calibrate``. It does less cross-validation work than jaxcal (1 fold, not 5).

Both fit different models (penalties and knots differ), so the printed log loss of each on
held-out data from the same curve is for orientation; the target is speed: >= 10x (warm)
at 1e5.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
import warnings

import numpy as np

# an empty compilation cache: the first call compiles (set before jaxcal is imported)
os.environ["JAXCAL_COMPILATION_CACHE"] = tempfile.mkdtemp(prefix="jaxcal-bench-spline-")


def _log(msg: str) -> None:
    from jaxcal._progress import log

    log(f"[bench_spline] {msg}")


def _problem(rng, n):
    """Probabilities of a model (float32, as a model's outputs are) and labels from a known
    non-linear calibration curve of their logit."""
    z = rng.normal(0.0, 1.5, size=n)
    p = (1 / (1 + np.exp(-z))).astype(np.float32)
    true = 1 / (1 + np.exp(-(0.7 * z + 0.4 * np.sin(2 * z) - 0.5)))
    return p, (rng.uniform(size=n) < true).astype(int)


def _jaxcal(p, y):
    import jax

    import jaxcal

    cal = jaxcal.SplineCalibration(on="logit").fit(p, y)
    return cal, jax.block_until_ready(cal.predict(p))


def _ml_insights(p, y):
    from ml_insights import SplineCalib

    cal = SplineCalib()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cal.fit(p.astype(np.float64), y)
        return cal, cal.calibrate(p.astype(np.float64))


def _seconds(fn, *args) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def _log_loss(q, y):
    q = np.clip(np.asarray(q, np.float64), 1e-15, 1 - 1e-15)
    return float(-np.mean(y * np.log(q) + (1 - y) * np.log1p(-q)))


_COLUMNS = ("n", "first", "new n", "warm", "ml-insights", "speed-up")


def run(sizes, repeats):
    print("fit + predict, n training probabilities")
    print(" ".join(f"{c:>11s}" for c in _COLUMNS), " test log loss (jaxcal / ml-insights)")
    rng = np.random.default_rng(0)
    for n in sizes:
        p, y = _problem(rng, n)
        pt, yt = _problem(rng, 100_000)
        _log(f"n = {n:,}: jaxcal first call, then 99% of n (the same size bucket)")
        first = _seconds(_jaxcal, p, y)
        new = _seconds(_jaxcal, p[: n - n // 100], y[: n - n // 100])
        ours, theirs = [], []
        for r in range(repeats):  # interleaved: both see the same load
            _log(f"n = {n:,}: repeat {r + 1}/{repeats}")
            ours.append(_seconds(_jaxcal, p, y))
            theirs.append(_seconds(_ml_insights, p, y))
        warm, peer = statistics.median(ours), statistics.median(theirs)
        cal, ref = _jaxcal(p, y)[0], _ml_insights(p, y)[0]  # outside the timing
        ll = _log_loss(cal.predict(pt), yt)
        ll_ref = _log_loss(ref.calibrate(pt.astype(np.float64)), yt)
        cells = [f"{n:,}", *(f"{x * 1e3:.0f}ms" for x in (first, new, warm, peer))]
        cells.append(f"{peer / warm:.1f}x")
        print(" ".join(f"{c:>11s}" for c in cells), f" {ll:.5f} / {ll_ref:.5f}", flush=True)


def _cpu() -> str:
    """The CPU's model name (``/proc/cpuinfo``; the platform's word for it elsewhere)."""
    try:
        with open("/proc/cpuinfo") as fh:
            return next(ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name"))
    except (OSError, StopIteration):  # pragma: no cover - not Linux
        return platform.processor() or platform.machine()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    import jax
    import ml_insights

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    versions = f"jax {jax.__version__}, ml-insights {ml_insights.__version__}"
    print(f"machine: {_cpu()}, {os.cpu_count()} cores, load average {load:.1f}; {versions}; "
          f"{jax.devices()[0].platform}, float32")  # fmt: skip
    run((1_000, 10_000) if args.quick else (10_000, 100_000), args.repeats)


if __name__ == "__main__":
    main()
