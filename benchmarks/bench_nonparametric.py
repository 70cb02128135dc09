"""Non-parametric calibrators: jaxcal vs scikit-learn and netcal, same data, same run, CPU.

    python benchmarks/bench_nonparametric.py            # full sizes (the targets below)
    python benchmarks/bench_nonparametric.py --quick    # small sizes, a smoke run
    python benchmarks/bench_nonparametric.py --isotonic-only   # only rows 1 and 2
    python benchmarks/bench_nonparametric.py --enir-only  # row 4 and the ENIR scaling table

Measured (after compilation; the first call's time is reported as compile + run):

1. isotonic regression, n = 1e6: ``jaxcal.isotonic_regression`` (fitted values) vs
   ``sklearn.isotonic.IsotonicRegression().fit_transform`` (target ratio <= 1.0);
2. 1,000 groups x 1,000 points: one grouped ``isotonic_regression`` call vs a Python loop of
   scikit-learn fits (target >= 10x);
   rows 1 and 2 time the CPU kernel (``jaxcal._native``) and then, for reference, the
   pure-JAX merge tree that GPU / TPU programs use (``JAXCAL_NATIVE=0``), on the same data;
3. ``jaxcal.BBQ`` at n = 1e5 vs ``netcal.binning.BBQ`` (target >= 20x);
4. ``jaxcal.ENIR`` at n = 1e4 vs ``netcal.binning.ENIR`` (target >= 20x);
5. ENIR scaling (target: O(n log n), not quadratic): fit time at n = 1e4, 1e5, 1e6 for
   0/1 labels and for IPS targets, with the number of path models and how many of them the
   BIC bound left to score exactly, and time / (n log2 n).

netcal (1.4.0) is installed with ``pip install --no-deps netcal`` for this benchmark only: it
imports torch at module level, which we do not install. Its BBQ and ENIR are NumPy code;
the only torch calls on their path are ``torch.from_numpy(...).type(torch.FloatTensor)`` and
``F.binary_cross_entropy(..., reduction="sum")`` in the model scores, which the shim below
reproduces in NumPy (float32, log clamped at -100 as torch does). Everything else is
netcal's own code.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
import types

import numpy as np


def _install_torch_shim() -> None:
    """Minimal NumPy stand-in for the torch calls on netcal's BBQ / ENIR path."""
    import scipy.stats  # noqa: F401  (import before the shim: they probe sys.modules)
    import sklearn.base  # noqa: F401

    class _T:
        def __init__(self, a):
            self.a = np.asarray(a)

        def type(self, dtype):
            return _T(self.a.astype(np.float32))

        def item(self):
            return float(self.a)

    def bce(est, gt, reduction="sum"):
        p, y = est.a.astype(np.float32), gt.a.astype(np.float32)
        with np.errstate(divide="ignore"):  # log(0) = -inf, clamped at -100 like torch
            lp = np.maximum(np.log(p), -100.0)
            lq = np.maximum(np.log1p(-p), -100.0)
        return _T(np.sum(-(y * lp + (1 - y) * lq), dtype=np.float32))

    class _Mod(types.ModuleType):
        Tensor = type("Tensor", (), {})
        dtype = type("dtype", (), {})
        FloatTensor = np.float32

        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            m = _Mod(f"{self.__name__}.{name}")
            setattr(self, name, m)
            return m

    torch = _Mod("torch")
    torch.from_numpy = _T
    functional = _Mod("torch.nn.functional")
    functional.binary_cross_entropy = bce
    torch.nn = _Mod("torch.nn")
    torch.nn.functional = functional
    sys.modules.update({"torch": torch, "torch.nn": torch.nn, "torch.nn.functional": functional})


def _timed(fn, repeats):
    t0 = time.perf_counter()
    out = fn()
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return out, first, statistics.median(times) if times else first


def _block(x):
    import jax

    return jax.block_until_ready(x)


def _row(name, ours, theirs, target, note=""):
    ratio = theirs / ours
    ok = "meets" if (ratio >= target) else "MISSES"
    print(
        f"{name:<44s} jaxcal {ours * 1e3:10.1f} ms   peer {theirs * 1e3:10.1f} ms   "
        f"speed-up {ratio:7.2f}x   (target >= {target}x: {ok}) {note}",
        flush=True,
    )


def variants(n: int = 20_000) -> None:
    """Distinct outputs and AUC change of every variant on held-out scores (ties matter for
    ranking: a calibrator that ties two items loses their order)."""
    from sklearn.metrics import roc_auc_score

    import jaxcal

    rng = np.random.default_rng(1)
    s = rng.normal(size=2 * n)
    y = (rng.uniform(size=2 * n) < 1 / (1 + np.exp(-(1.5 * s - 1)))).astype(int)
    tr, te = slice(0, n), slice(n, 2 * n)
    auc0 = roc_auc_score(y[te], s[te])
    cals = {
        "IsotonicCalibration(step)": jaxcal.IsotonicCalibration(interpolation="step"),
        "IsotonicCalibration(linear)": jaxcal.IsotonicCalibration(),
        "IsotonicCalibration(centered)": jaxcal.IsotonicCalibration(centered=True),
        "SmoothedIsotonic(100)": jaxcal.SmoothedIsotonic(n_buckets=100),
        "SmoothedIsotonic(100, centered)": jaxcal.SmoothedIsotonic(n_buckets=100, centered=True),
        "HistogramBinning(15, quantile)": jaxcal.HistogramBinning(n_bins=15),
        "BBQ": jaxcal.BBQ(),
        "ENIR": jaxcal.ENIR(),
        "PlattScaling (reference)": jaxcal.PlattScaling(),
    }
    print(f"variants: n_train = n_test = {n:,}; test scores distinct: {np.unique(s[te]).size:,}")
    print(f"{'calibrator':<40s} {'distinct outputs':>16s} {'AUC change':>11s}")
    for name, est in cals.items():
        p = np.asarray(est.fit(s[tr], y[tr]).predict(s[te]))
        print(f"{name:<40s} {np.unique(p).size:16,d} {roc_auc_score(y[te], p) - auc0:+11.5f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-netcal", action="store_true")
    ap.add_argument("--variants-only", action="store_true", help="only the ties / AUC table")
    ap.add_argument(
        "--isotonic-only", action="store_true", help="only the isotonic rows (1. and 2.)"
    )
    ap.add_argument(
        "--enir-only", action="store_true", help="only ENIR vs netcal (4.) and scaling (5.)"
    )
    ap.add_argument("--bbq-only", action="store_true", help="only BBQ vs netcal (3.)")
    args = ap.parse_args()

    import jax

    jax.config.update("jax_enable_x64", True)
    from sklearn.isotonic import IsotonicRegression

    import jaxcal

    try:
        model = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        model = next(ln.split(":", 1)[1].strip() for ln in model.splitlines() if "Model name" in ln)
    except Exception:  # pragma: no cover - not Linux
        model = platform.processor()
    print(f"machine: {model}; jax {jax.__version__} on {jax.devices()[0].platform}; float64")
    if args.bbq_only:
        _install_torch_shim()
        bbq_vs_netcal(10_000 if args.quick else 100_000, args.repeats)
        return
    if not (args.isotonic_only or args.enir_only):
        variants(2_000 if args.quick else 20_000)
    if args.variants_only:
        return
    if args.enir_only:
        enir_vs_netcal(2_000 if args.quick else 10_000, args.repeats)
        enir_scaling((10_000, 100_000) if args.quick else (10_000, 100_000, 1_000_000))
        return

    n_iso = 100_000 if args.quick else 1_000_000
    groups, per = (100, 1000) if args.quick else (1000, 1000)
    n_bbq = 10_000 if args.quick else 100_000
    n_enir = 2_000 if args.quick else 10_000
    rng = np.random.default_rng(0)
    r = args.repeats

    from jaxcal._native import ENV, pav_cpu_available

    paths = ["native", "portable"] if pav_cpu_available() else ["portable"]
    print(f"isotonic paths timed: {', '.join(paths)} (native = compiled CPU kernel)")

    def on_path(path, fn):
        if path == "portable":
            os.environ[ENV] = "0"
        try:
            return _timed(fn, r)
        finally:
            os.environ.pop(ENV, None)

    # 1. isotonic at n_iso
    x = rng.normal(size=n_iso)
    y = (rng.uniform(size=n_iso) < 1 / (1 + np.exp(-2 * x))).astype(float)
    ref, _, t_sk = _timed(lambda: IsotonicRegression().fit_transform(x, y), r)
    for path in paths:
        ours, first, t_ours = on_path(path, lambda: _block(jaxcal.isotonic_regression(x, y)))
        assert np.abs(np.asarray(ours) - ref).max() < 1e-9
        print(f"isotonic n={n_iso:,} ({path}): first call (compile + run) {first:.2f} s")
        _row(f"isotonic_regression n={n_iso:,} ({path})", t_ours, t_sk, 1.0)

    # 2. grouped
    xg = rng.normal(size=groups * per)
    yg = (rng.uniform(size=groups * per) < 1 / (1 + np.exp(-xg))).astype(float)
    gid = np.repeat(np.arange(groups), per)

    def loop():
        out = np.empty_like(xg)
        for k in range(groups):
            sl = slice(k * per, (k + 1) * per)
            out[sl] = IsotonicRegression().fit_transform(xg[sl], yg[sl])
        return out

    ref, _, t_sk = _timed(loop, max(1, r - 2))
    for path in paths:
        ours, first, t_ours = on_path(
            path, lambda: _block(jaxcal.isotonic_regression(xg, yg, group=gid))
        )
        assert np.abs(np.asarray(ours) - ref).max() < 1e-9
        print(f"grouped {groups}x{per} ({path}): first call (compile + run) {first:.2f} s")
        _row(f"{groups} groups x {per} vs sklearn loop ({path})", t_ours, t_sk, 10.0)

    if args.skip_netcal or args.isotonic_only:
        return
    try:
        _install_torch_shim()
        from netcal.binning import BBQ as NetcalBBQ
    except ImportError as exc:
        print(f"netcal not available ({exc}); pip install --no-deps netcal")
        return

    del NetcalBBQ  # imported above to check that netcal is there
    bbq_vs_netcal(n_bbq, r)  # 3.
    enir_vs_netcal(n_enir, r)  # 4.


def bbq_vs_netcal(n_bbq: int, r: int) -> None:
    """Row 3: ``jaxcal.BBQ`` vs ``netcal.binning.BBQ`` on the same data, what a user runs:
    fit, then predict the training scores (``transform`` in netcal)."""
    from netcal.binning import BBQ as NetcalBBQ

    import jaxcal

    rng = np.random.default_rng(3)
    p = rng.uniform(size=n_bbq)
    yb = (rng.uniform(size=n_bbq) < p**2).astype(int)
    q = np.linspace(0, 1, 101)
    cal, first, t_ours = _timed(lambda: _block(jaxcal.BBQ().fit(p, yb).predict(p)), r)
    pred_ours = np.asarray(jaxcal.BBQ().fit(p, yb).predict(q))
    t0 = time.perf_counter()
    nb = NetcalBBQ().fit(p, yb)
    nb.transform(p)
    t_nc = time.perf_counter() - t0
    pred_nc = nb.transform(q)
    print(
        f"BBQ n={n_bbq:,}: first call {first:.2f} s; max |jaxcal - netcal| on a grid "
        f"{np.abs(pred_ours - pred_nc).max():.3g} (netcal prunes models by its elbow rule)"
    )
    _row(f"BBQ n={n_bbq:,} fit + predict vs netcal", t_ours, t_nc, 20.0)


def enir_vs_netcal(n_enir: int, r: int) -> None:
    """Row 4: ``jaxcal.ENIR`` vs ``netcal.binning.ENIR`` on the same data."""
    import jaxcal

    _install_torch_shim()
    from netcal.binning import ENIR as NetcalENIR

    rng = np.random.default_rng(4)
    q = np.linspace(0, 1, 101)
    pe = rng.uniform(size=n_enir)
    ye = (rng.uniform(size=n_enir) < pe).astype(int)
    cal, first, t_ours = _timed(lambda: _block(jaxcal.ENIR().fit(pe, ye).knots_y), r)
    pred_ours = np.asarray(jaxcal.ENIR().fit(pe, ye).predict(q))
    t0 = time.perf_counter()
    ne = NetcalENIR().fit(pe, ye)
    t_nc = time.perf_counter() - t0
    pred_nc = ne.transform(q)
    print(
        f"ENIR n={n_enir:,}: first call {first:.2f} s; max |jaxcal - netcal| on a grid "
        f"{np.abs(pred_ours - pred_nc).max():.3g} (netcal: elbow pruning, step prediction)"
    )
    _row(f"ENIR n={n_enir:,} vs netcal", t_ours, t_nc, 20.0)


def enir_scaling(sizes) -> None:
    """Row 5: ENIR fit time against n (0/1 labels, and IPS targets up to 20)."""
    import jaxcal

    print(f"{'ENIR scaling':<34s} {'n':>10s} {'models':>8s} {'scored':>7s} {'fit s':>8s} "
          f"{'us per n log2 n':>16s}")  # fmt: skip
    for n in sizes:
        rng = np.random.default_rng(n)
        p = rng.uniform(size=n)
        z = rng.normal(size=n)
        cases = {
            "labels y ~ Bernoulli(s)": ((p, (rng.uniform(size=n) < p).astype(int)), {}),
            "IPS (propensity 0.05-1)": (
                (z, (rng.uniform(size=n) < 1 / (1 + np.exp(-2 * z))).astype(int)),
                {"propensity": rng.uniform(0.05, 1.0, n), "loss": "ips"},
            ),
        }
        for name, (data, kw) in cases.items():
            _block(jaxcal.ENIR().fit(*data, **kw).knots_y)  # compile this size
            t0 = time.perf_counter()
            cal = jaxcal.ENIR().fit(*data, **kw)
            _block(cal.knots_y)
            dt = time.perf_counter() - t0
            print(
                f"{name:<34s} {n:>10,d} {int(cal.n_models):>8,d} {int(cal.n_scored):>7,d} "
                f"{dt:>8.3f} {dt / (n * np.log2(n)) * 1e6:>16.4f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
