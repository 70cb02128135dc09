"""Isotonic calibration and metrics from counts by distinct score, against the in-memory fit
(jaxcal and scikit-learn) on the same data.

    python benchmarks/bench_score_counts.py --sizes 1000000,10000000
    python benchmarks/bench_score_counts.py --quick

For each size ``n``: continuous scores (standard normal, labels from a logistic link) and the
same scores rounded to 3 decimals (a few thousand distinct values). Timed, in seconds
(median of ``--repeats`` after one warm-up call, so compilation is excluded):

* ``sklearn fit``: ``IsotonicRegression().fit`` on the raw data (in memory);
* ``jaxcal fit``: ``IsotonicCalibration().fit`` on the raw data;
* ``counts``: ``score_counts`` of the whole array (exact); ``fit_counts``: the fit from them;
* ``stream 4096``: ``ScoreCounts.from_chunks`` over chunks of ``--chunk`` samples on a fixed
  grid of 4096 equal-width bins on [-5, 5], then ``fit_counts`` (memory: 4096 entries);
* ``metrics``: AUC, Brier, log loss and ECE of the probabilities ``sigmoid(score)`` rounded to
  5 decimals, in memory (``jaxcal.metrics``) and from counts (counting included).

For the quantised fit it also reports ``quantization_bound`` and the realised weighted mean
squared difference to scikit-learn's exact fit and excess squared error.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import jax
import numpy as np
from sklearn.isotonic import IsotonicRegression

import jaxcal
from jaxcal import metrics
from jaxcal._validation import PrecisionWarning
from jaxcal.fitting.score_counts import ScoreCounts, score_counts


def timed(fun, repeats: int) -> tuple[float, object]:
    out = jax.block_until_ready(fun())  # warm-up (compiles)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = jax.block_until_ready(fun())
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def data(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    s = rng.normal(size=n)
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-2 * s))).astype(float)
    return s, y


def bench_fit(n: int, chunk: int, repeats: int) -> None:
    s, y = data(n)
    cal = jaxcal.IsotonicCalibration()
    edges = np.linspace(-5, 5, 4097)
    for label, scores in (("continuous", s), ("3 decimals", np.round(s, 3))):
        t_sk, _ = timed(lambda x=scores: IsotonicRegression().fit(x, y), repeats)
        t_fit, _ = timed(lambda x=scores: cal.fit(x, y), repeats)
        t_counts, counts = timed(lambda x=scores: score_counts(x, y), repeats)
        t_fitc, _ = timed(lambda c=counts: cal.fit_counts(c), repeats)

        def chunks(x=scores):
            for i in range(0, n, chunk):
                yield x[i : i + chunk], y[i : i + chunk]

        t_stream, q = timed(lambda: ScoreCounts.from_chunks(chunks, bins=edges), repeats)
        t_fitq, fitted = timed(lambda q=q: cal.fit_counts(q), repeats)
        exact = IsotonicRegression(out_of_bounds="clip").fit(scores, y).predict(scores)
        g = np.asarray(fitted.predict(scores), np.float64)
        gap = np.mean((g - exact) ** 2)
        excess = np.mean((g - y) ** 2) - np.mean((exact - y) ** 2)
        print(
            f"n={n:>9,} {label:>10}: distinct {counts.scores.size:>9,} | sklearn fit "
            f"{t_sk:.3f} | jaxcal fit {t_fit:.3f} | counts {t_counts:.3f} + fit_counts "
            f"{t_fitc:.3f} | stream 4096 {t_stream:.3f} + fit {t_fitq:.4f} "
            f"({q.scores.size} bins, bound {fitted.quantization_bound:.2e}, mean sq diff "
            f"{gap:.1e}, excess {excess:.1e})",
            flush=True,
        )


def bench_metrics(n: int, repeats: int) -> None:
    s, y = data(n, seed=1)
    p = np.round(1 / (1 + np.exp(-s)), 5)
    names = ("auc", "brier", "nll", "ece")

    def in_memory():
        return [float(getattr(metrics, k)(p, y)) for k in names]

    def from_counts():
        c = score_counts(p, y)
        return [getattr(metrics, f"{k}_from_counts")(c) for k in names]

    t_mem, a = timed(in_memory, repeats)
    t_cnt, b = timed(from_counts, repeats)
    diff = max(abs(u - v) for u, v in zip(a, b, strict=True))
    print(
        f"n={n:>9,} metrics (AUC, Brier, NLL, ECE): in memory {t_mem:.3f} s | from counts "
        f"{t_cnt:.3f} s (counting included) | largest difference {diff:.1e}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000")
    parser.add_argument("--chunk", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    # 1e7 float64 normal scores hold pairs closer than float32 resolves: in JAX's default
    # precision both fits (raw and from counts) warn and see the same ties
    warnings.filterwarnings("ignore", category=PrecisionWarning)
    sizes = [20_000] if args.quick else [int(v) for v in args.sizes.split(",")]
    chunk = 5_000 if args.quick else args.chunk
    repeats = 1 if args.quick else args.repeats
    print(f"jax {jax.__version__}, x64 {jax.config.jax_enable_x64}, devices {jax.devices()}")
    for n in sizes:
        bench_fit(n, chunk, repeats)
        bench_metrics(n, repeats)


if __name__ == "__main__":
    main()
