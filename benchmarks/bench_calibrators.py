"""Parametric calibration speed: jaxcal vs scipy / scikit-learn, same data, same run.

1. Gaussian calibration at n = 1e6: ``jaxcal.GaussianCalibration().fit`` (exact active-set
   Newton, monotone on the range) vs scipy L-BFGS-B on the *same* constrained objective
   (reparameterised to bound constraints: u = C theta >= 0) and vs scikit-learn's
   unpenalised LogisticRegression on [s^2, s] (no constraint; it only has to fit).
2. 1,000 Gaussian calibrators x 10,000 scores: one ``fit_batch`` call vs a Python loop of
   scikit-learn fits.

Everything runs in float64. jaxcal's compile time is measured on the first call and
reported separately; the timed runs are the median of repeated calls after compilation.
Objective values are printed so that the speed comparison is between equal solutions.

Usage::

    python benchmarks/bench_calibrators.py            # full sizes (minutes on 2 cores)
    python benchmarks/bench_calibrators.py --quick    # smoke sizes
    python benchmarks/bench_calibrators.py --only batch --batch 200   # one part, other size
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import time
import warnings

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
from scipy import optimize  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402

from jaxcal.calibrators.gaussian import GaussianCalibration  # noqa: E402


def simulate(rng, n):
    """Class-conditional Gaussians with unequal variances (the model behind the map)."""
    y = (rng.uniform(size=n) < 0.3).astype(np.float64)
    s = np.where(y == 1, rng.normal(1.0, 0.8, n), rng.normal(0.0, 1.2, n))
    return s, y


def objective(theta, X, y):
    z = X @ theta
    return float(np.sum(np.logaddexp(0.0, z) - y * z))


def scipy_lbfgsb(s, y):
    """L-BFGS-B on the same objective; monotonicity as bounds on u = [2a lo + b, 2a hi + b]."""
    lo, hi = s.min(), s.max()
    X = np.column_stack([s * s, s, np.ones_like(s)])
    M = np.array([[2 * lo, 1.0], [2 * hi, 1.0]])
    Minv = np.linalg.inv(M)

    def theta_of(q):
        ab = Minv @ q[:2]
        return np.array([ab[0], ab[1], q[2]])

    def f(q):
        theta = theta_of(q)
        z = X @ theta
        g_theta = X.T @ (1.0 / (1.0 + np.exp(-z)) - y)
        g = np.concatenate([Minv.T @ g_theta[:2], g_theta[2:]])
        return float(np.sum(np.logaddexp(0.0, z) - y * z)), g

    res = optimize.minimize(
        f,
        np.zeros(3),
        jac=True,
        method="L-BFGS-B",
        bounds=[(0, None), (0, None), (None, None)],
        options={"maxiter": 10_000, "ftol": 1e-13, "gtol": 1e-9},
    )
    return theta_of(res.x), res


CPU_TIMES: dict[str, float] = {}  # median process CPU seconds of the last timed() per label


def timed(fn, repeat, label=None):
    """Median wall seconds of ``repeat`` calls (and, under ``label``, median process CPU
    seconds: on a shared machine CPU time is not inflated by waiting for a core)."""
    times, cpu, out = [], [], None
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    if label is not None:
        CPU_TIMES[label] = statistics.median(cpu)
    return statistics.median(times), out


def block(fitted):
    jax.block_until_ready(fitted.theta)
    return fitted


def machine() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        name = next(ln.split(":", 1)[1].strip() for ln in out.splitlines() if "Model name" in ln)
    except Exception:  # pragma: no cover
        name = platform.processor()
    return f"{name}; jax {jax.__version__} on {jax.devices()[0].platform}"


def bench_single(n, repeat, rng):
    s, y = simulate(rng, n)
    est = GaussianCalibration()
    t0 = time.perf_counter()
    block(est.fit(s, y))
    first = time.perf_counter() - t0
    t_jax, fitted = timed(lambda: block(est.fit(s, y)), repeat, "jax1")
    X = np.column_stack([s * s, s, np.ones_like(s)])
    t_scipy, (theta_sp, res) = timed(lambda: scipy_lbfgsb(s, y), max(1, repeat // 3), "scipy1")
    lr = LogisticRegression(C=np.inf, max_iter=1000)
    t_sk, _ = timed(lambda: lr.fit(X[:, :2], y), max(1, repeat // 3), "sk1")
    theta_sk = np.concatenate([lr.coef_[0], lr.intercept_])
    print(f"\n[1] Gaussian calibration, n = {n:,} (float64)")
    print(f"  jaxcal compile + first call : {first:8.3f} s (compile ~ {first - t_jax:.3f} s)")
    rows = [
        ("jaxcal GaussianCalibration", t_jax, objective(np.asarray(fitted.theta), X, y)),
        ("scipy L-BFGS-B (same obj.)", t_scipy, objective(theta_sp, X, y)),
        ("sklearn LogisticRegression", t_sk, objective(theta_sk, X, y)),
    ]
    for name, t, obj in rows:
        print(f"  {name:28s}: {t:8.4f} s   objective {obj:.10f}")
    print(f"  jaxcal status: {fitted.status.message}, {int(fitted.status.n_iter)} Newton steps")
    print(f"  speed-up vs scipy   : {t_scipy / t_jax:6.1f}x (target >= 10x)")
    print(f"  speed-up vs sklearn : {t_sk / t_jax:6.1f}x (target >= 10x)")
    c = CPU_TIMES
    print(
        f"  process CPU time    : jaxcal {c['jax1']:.4f} s, scipy {c['scipy1']:.4f} s, "
        f"sklearn {c['sk1']:.4f} s -> {c['scipy1'] / c['jax1']:.1f}x / {c['sk1'] / c['jax1']:.1f}x"
    )
    return dict(n=n, compile=first - t_jax, jax=t_jax, scipy=t_scipy, sklearn=t_sk)


def bench_batch(b, n, repeat, rng):
    s, y = simulate(rng, b * n)
    s, y = s.reshape(b, n), y.reshape(b, n)
    est = GaussianCalibration()
    t0 = time.perf_counter()
    block(est.fit_batch(s, y))
    first = time.perf_counter() - t0
    t_jax, fitted = timed(lambda: block(est.fit_batch(s, y)), repeat, "jaxB")

    def loop():
        coefs = []
        for i in range(b):
            lr = LogisticRegression(C=np.inf, max_iter=1000)
            lr.fit(np.column_stack([s[i] ** 2, s[i]]), y[i])
            coefs.append(np.concatenate([lr.coef_[0], lr.intercept_]))
        return np.array(coefs)

    t_sk, coefs = timed(loop, 1, "skB")
    worst = max(
        objective(np.asarray(fitted.theta[i]), np.column_stack([s[i] ** 2, s[i], np.ones(n)]), y[i])
        - objective(coefs[i], np.column_stack([s[i] ** 2, s[i], np.ones(n)]), y[i])
        for i in range(min(b, 50))
    )
    print(f"\n[2] {b:,} Gaussian calibrators x {n:,} scores, one fit_batch call (float64)")
    print(f"  jaxcal compile + first call : {first:8.3f} s (compile ~ {first - t_jax:.3f} s)")
    print(f"  jaxcal fit_batch            : {t_jax:8.4f} s")
    print(f"  sklearn loop of {b} fits   : {t_sk:8.4f} s")
    print(f"  max objective gap (jaxcal - sklearn, first 50; <= 0 is better): {worst:.3e}")
    print(f"  converged: {int(np.asarray(fitted.status.converged).sum())}/{b}")
    print(f"  speed-up vs sklearn loop : {t_sk / t_jax:6.1f}x (target >= 20x)")
    c = CPU_TIMES
    print(
        f"  process CPU time : jaxcal {c['jaxB']:.4f} s, sklearn loop {c['skB']:.4f} s -> "
        f"{c['skB'] / c['jaxB']:.1f}x"
    )
    return dict(b=b, n=n, compile=first - t_jax, jax=t_jax, sklearn=t_sk)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small smoke sizes")
    ap.add_argument("--repeat", type=int, default=5, help="timed repetitions (median)")
    ap.add_argument("--only", choices=["single", "batch"], help="run one of the two parts")
    ap.add_argument("--n", type=int, help="scores in the single fit")
    ap.add_argument("--batch", type=int, help="problems in the batched fit")
    ap.add_argument("--m", type=int, help="scores per problem in the batched fit")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    n, b, m = (20_000, 50, 2_000) if args.quick else (1_000_000, 1_000, 10_000)
    n, b, m = args.n or n, args.batch or b, args.m or m
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}")
    warnings.simplefilter("ignore", category=UserWarning)
    if args.only != "batch":
        bench_single(n, args.repeat, rng)
    if args.only != "single":
        bench_batch(b, m, max(1, args.repeat // 2), rng)


if __name__ == "__main__":
    main()
