"""Warm throughput at large n: jaxcal against the peer a user would otherwise run.

Five workloads, each a blocked fit + predict (``jax.block_until_ready``) on one data set:

1. ``gaussian``: ``GaussianCalibration().fit(s, y).predict(s)`` at n = 1e6 against scipy
   L-BFGS-B on the same constrained objective (``bench_calibrators.scipy_lbfgsb``) and its
   predicted probabilities;
2. ``platt_batch``: 200 Platt calibrators of 1e4 scores, ``PlattScaling().fit_batch`` and the
   batched predict, against a loop of scikit-learn ``LogisticRegression(C=inf)`` fits and
   ``predict_proba``;
3. ``isotonic``: ``IsotonicCalibration().fit(s, y).predict(s)`` at n = 1e6 against
   scikit-learn ``IsotonicRegression(out_of_bounds="clip")`` fit + predict;
4. ``grouped``: 1,000 groups x 1,000 points in one ``isotonic_regression(..., group=)`` call
   against a loop of scikit-learn ``fit_transform`` calls;
5. ``clicks``: one EM iteration of PBM and CCM on 1e5 simulated sessions x 10 results
   (``bench_clicks``'s log), from the public ``fit(log, max_iter=k, tol=0)``:
   ``(t(k = 11) - t(k = 1)) / 10``, against ``bench_clicks``'s pure-Python EM iteration
   on 2,000 sessions of the same log (per session).

Rows 1-4 run in float64 (as ``bench_calibrators`` and ``bench_nonparametric``), row 5 in
float32 (as ``bench_clicks``). Every (workload, seed) runs in a fresh process with a
``JAXCAL_COMPILATION_CACHE`` folder per workload: seed 0's first call compiles (cold
cache), later seeds' first calls load from the folder (warm cache). In a process: the
first call is timed on its own, then ``--warmup`` calls, then ``--repeats`` rounds that
time jaxcal and the peer one after the other (the same load on both sides); a process
reports medians, the table the spread (min-max) over seeds. Results are checked against
the peer before they are printed.

``--against LABEL=PATH`` runs the same workloads, in the same run and interleaved per
seed, on another checkout of jaxcal (``PYTHONPATH=PATH``; its compiled kernel built there
with ``python setup.py build_ext --inplace``)::

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_throughput.py
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_throughput.py \\
        --against before=/tmp/before --rows gaussian,clicks --seeds 5
    python benchmarks/bench_throughput.py --quick      # small sizes, a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
RESULT_TAG = "BENCH_RESULT "
ROWS = ("gaussian", "platt_batch", "isotonic", "grouped", "clicks")
SIZES = {
    "gaussian": {"n": 1_000_000},
    "platt_batch": {"problems": 200, "n": 10_000},
    "isotonic": {"n": 1_000_000},
    "grouped": {"groups": 1_000, "n": 1_000},
    "clicks": {"sessions": 100_000, "ref_sessions": 2_000, "iters": 10},
}
QUICK_SIZES = {
    "gaussian": {"n": 100_000},
    "platt_batch": {"problems": 20, "n": 10_000},
    "isotonic": {"n": 100_000},
    "grouped": {"groups": 100, "n": 1_000},
    "clicks": {"sessions": 10_000, "ref_sessions": 500, "iters": 5},
}


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def _settle() -> None:
    """Wait for background compiles of jaxcal's program tiers (a checkout without them has
    nothing to wait for)."""
    try:
        from jaxcal._jit import _wait_for_tier_ups
    except ImportError:
        return
    _wait_for_tier_ups()


# --------------------------------------------------------------------------- workloads
# Each returns (jaxcal call, peer call, check(jaxcal output, peer output) -> str).
def _gaussian(rng, n):
    import jax
    from bench_calibrators import objective, scipy_lbfgsb, simulate

    import jaxcal

    s, y = simulate(rng, n)
    X = np.column_stack([s * s, s, np.ones_like(s)])

    def ours():
        cal = jaxcal.GaussianCalibration().fit(s, y)
        return jax.block_until_ready((cal.theta, cal.predict(s)))

    def peer():
        theta, _ = scipy_lbfgsb(s, y)
        return theta, _sigmoid(X @ theta)

    def check(a, b):
        gap = objective(np.asarray(a[0]), X, y) - objective(b[0], X, y)
        assert gap <= 1e-6 * n, f"jaxcal's objective is worse than scipy's by {gap}"
        return f"objective jaxcal - scipy {gap:+.2e} (<= 0: jaxcal lower)"

    return ours, peer, check


def _platt_batch(rng, problems, n):
    import jax
    from sklearn.linear_model import LogisticRegression

    import jaxcal

    slope = rng.uniform(0.5, 2.5, (problems, 1))
    shift = rng.uniform(-1.0, 1.0, (problems, 1))
    s = rng.normal(size=(problems, n))
    y = (rng.uniform(size=(problems, n)) < _sigmoid(slope * s + shift)).astype(np.float64)

    def ours():
        return jax.block_until_ready(jaxcal.PlattScaling().fit_batch(s, y).predict(s))

    def peer():
        out = np.empty_like(s)
        for i in range(problems):
            x = s[i][:, None]
            out[i] = LogisticRegression(C=np.inf).fit(x, y[i]).predict_proba(x)[:, 1]
        return out

    def check(a, b):
        diff = float(np.abs(np.asarray(a) - b).max())
        assert diff < 1e-3, f"probabilities differ by {diff}"
        return f"max |p jaxcal - p scikit-learn| {diff:.1e} (lbfgs tol 1e-4)"

    return ours, peer, check


def _isotonic(rng, n):
    import jax
    from sklearn.isotonic import IsotonicRegression

    import jaxcal

    s = rng.normal(size=n)
    y = (rng.uniform(size=n) < _sigmoid(2 * s)).astype(np.float64)

    def ours():
        return jax.block_until_ready(jaxcal.IsotonicCalibration().fit(s, y).predict(s))

    def peer():
        return IsotonicRegression(out_of_bounds="clip").fit(s, y).predict(s)

    def check(a, b):
        diff = float(np.abs(np.asarray(a) - b).max())
        assert diff < 1e-9, f"fitted values differ by {diff}"
        return f"max |jaxcal - scikit-learn| {diff:.1e}"

    return ours, peer, check


def _grouped(rng, groups, n):
    import jax
    from sklearn.isotonic import IsotonicRegression

    import jaxcal

    x = rng.normal(size=groups * n)
    y = (rng.uniform(size=groups * n) < _sigmoid(x)).astype(np.float64)
    gid = np.repeat(np.arange(groups), n)

    def ours():
        return jax.block_until_ready(jaxcal.isotonic_regression(x, y, group=gid))

    def peer():
        out = np.empty_like(x)
        for k in range(groups):
            sl = slice(k * n, (k + 1) * n)
            out[sl] = IsotonicRegression().fit_transform(x[sl], y[sl])
        return out

    def check(a, b):
        diff = float(np.abs(np.asarray(a) - b).max())
        assert diff < 1e-9, f"fitted values differ by {diff}"
        return f"max |jaxcal - scikit-learn| {diff:.1e}"

    return ours, peer, check


def _clicks_worker(seed, sizes, repeats, warmup) -> dict:
    """Row 5: seconds per EM iteration of PBM and CCM (public ``fit``), and the pure-Python
    reference's seconds per session and iteration."""
    import jax
    from bench_clicks import reference_runner

    from jaxcal.clicks import MODELS, example_params, simulate

    S, k = sizes["sessions"], sizes["iters"]
    out = {}
    for name in ("PBM", "CCM"):
        params = example_params(name, n_queries=1000, n_docs=15, key=jax.random.key(seed))
        log = simulate(name, params, S, key=jax.random.key(seed + 1))
        est = MODELS[name]()

        def fit(n_iter, est=est, log=log):
            return jax.block_until_ready(est.fit(log, max_iter=n_iter, tol=0.0).params)

        ref = reference_runner(name, log[: sizes["ref_sessions"]])
        first, _ = _timed(lambda fit=fit: (fit(1), fit(k + 1)))
        for _ in range(warmup):
            fit(1), fit(k + 1)
        _settle()
        t1, tk, tref = [], [], []
        for _ in range(repeats):  # interleaved: the same load on every side
            t1.append(_timed(lambda fit=fit: fit(1))[0])
            tref.append(ref()[0] / sizes["ref_sessions"] * S)
            tk.append(_timed(lambda fit=fit: fit(k + 1))[0])
        per_iter = (min(tk) - min(t1)) / k
        out[name] = {
            "first": first,
            "ours": per_iter,
            "peer": min(tref),
            "fit_1": min(t1),
            "note": f"fit(max_iter=1) {min(t1):.3f} s",
        }
    return out


def worker(row: str, seed: int, repeats: int, warmup: int, quick: bool) -> dict:
    """One (workload, seed) in this process: first call, warm-up, interleaved repeats."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    import jax

    sizes = (QUICK_SIZES if quick else SIZES)[row]
    if row == "clicks":
        return {"parts": _clicks_worker(seed, sizes, repeats, warmup)}
    jax.config.update("jax_enable_x64", True)
    rng = np.random.default_rng(seed)
    make = {
        "gaussian": _gaussian,
        "platt_batch": _platt_batch,
        "isotonic": _isotonic,
        "grouped": _grouped,
    }[row]
    ours, peer, check = make(rng, **sizes)
    first, out = _timed(ours)
    for _ in range(warmup):
        ours()
    _settle()
    t_ours, t_peer = [], []
    for _ in range(repeats):
        t, out = _timed(ours)
        t_ours.append(t)
        t, ref = _timed(peer)
        t_peer.append(t)
    note = check(out, ref)
    return {
        "parts": {
            row: {
                "first": first,
                "ours": statistics.median(t_ours),
                "peer": statistics.median(t_peer),
                "note": note,
            }
        }
    }


# --------------------------------------------------------------------------- parent side
def run_worker(row, seed, args, tree: str | None, cache: Path) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", row, "--seed", str(seed)]
    cmd += ["--repeats", str(args.repeats), "--warmup", str(args.warmup)]
    cmd += ["--quick"] if args.quick else []
    env = dict(os.environ)
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    env["JAXCAL_COMPILATION_CACHE"] = str(cache)
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join([tree, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(RESULT_TAG)]
    if proc.returncode != 0 or not lines:
        tail = "\n".join(proc.stderr.strip().splitlines()[-12:])
        raise RuntimeError(f"{row} seed {seed} failed (rc {proc.returncode}):\n{tail}")
    return json.loads(lines[-1][len(RESULT_TAG) :])


def _span(values, scale=1.0, fmt="{:.1f}") -> str:
    lo, hi = min(values) * scale, max(values) * scale
    return (
        fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}-{fmt.format(hi)}"
    )


def machine() -> str:
    import platform

    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        name = next(ln.split(":", 1)[1].strip() for ln in out.splitlines() if "Model name" in ln)
    except Exception:  # not Linux
        name = platform.processor()
    try:
        import scipy.linalg  # noqa: F401  (loads SciPy's BLAS)
        from threadpoolctl import threadpool_info

        blas = ", ".join(
            f"{lib['internal_api']} {lib.get('architecture')} x{lib['num_threads']}"
            for lib in threadpool_info()
            if lib.get("user_api") == "blas"
        )
    except ImportError:
        blas = "threadpoolctl not installed"
    return f"{name}, {os.cpu_count()} CPU(s); BLAS {blas}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default=",".join(ROWS), help=f"workloads ({', '.join(ROWS)})")
    ap.add_argument("--seeds", type=int, default=5, help="data sets, one process each")
    ap.add_argument("--repeats", type=int, default=5, help="timed rounds per process")
    ap.add_argument("--warmup", type=int, default=2, help="untimed calls after the first")
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    ap.add_argument(
        "--against",
        action="append",
        default=[],
        metavar="LABEL=PATH",
        help="also run another checkout of jaxcal (repeatable)",
    )
    ap.add_argument("--skip-this", action="store_true", help="run only the --against checkouts")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per process")
    ap.add_argument("--json", type=Path, help="write every result to this file")
    ap.add_argument("--worker", choices=ROWS, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker:
        res = worker(args.worker, args.seed, args.repeats, args.warmup, args.quick)
        print(RESULT_TAG + json.dumps(res), flush=True)
        return

    import jax

    trees: dict[str, str | None] = {} if args.skip_this else {"this checkout": None}
    for item in args.against:
        label, _, path = item.partition("=")
        trees[label] = str(Path(path).resolve())
    rows = args.rows.split(",")
    unknown = set(rows) - set(ROWS)
    if unknown:
        ap.error(f"unknown rows {sorted(unknown)}; choose from {ROWS}")
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}")
    print(
        f"jax {jax.__version__}; {args.seeds} seeds x {args.repeats} interleaved rounds "
        f"(+{args.warmup} warm-up calls) per process; {'quick' if args.quick else 'full'} sizes",
        flush=True,
    )
    results: dict = {}
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="jaxcal-throughput-") as tmp:
        for row in rows:
            for seed in range(args.seeds):
                labels = list(trees)
                labels = labels[seed % len(labels) :] + labels[: seed % len(labels)]
                for label in labels:  # the order of the checkouts rotates with the seed
                    cache = Path(tmp) / f"{label.replace(' ', '-')}-{row}"
                    res = run_worker(row, seed, args, trees[label], cache)
                    for part, r in res["parts"].items():
                        results.setdefault(part, {}).setdefault(label, []).append(r)
                        print(
                            f"  {part:<12s} seed {seed} {label:<14s} first {r['first']:7.2f} s"
                            f"  jaxcal {r['ours'] * 1e3:9.1f} ms  peer {r['peer'] * 1e3:9.1f} "
                            f"ms  x{r['peer'] / r['ours']:6.1f}  {r['note']}  (load "
                            f"{os.getloadavg()[0]:.1f})",
                            flush=True,
                        )
    print(
        f"\n{'workload':<12s} {'checkout':<14s} {'first s (cold; warm cache)':>28s} "
        f"{'jaxcal ms':>14s} {'peer ms':>16s} {'peer / jaxcal':>14s}"
    )
    for part, by_tree in results.items():
        for label, rs in by_tree.items():
            cold = rs[0]["first"]
            warm = statistics.median(r["first"] for r in rs[1:]) if len(rs) > 1 else None
            first = f"{cold:.2f}" + ("" if warm is None else f"; {warm:.2f}")
            print(
                f"{part:<12s} {label:<14s} {first:>28s} {_span([r['ours'] for r in rs], 1e3):>14s}"
                f" {_span([r['peer'] for r in rs], 1e3):>16s}"
                f" {_span([r['peer'] / r['ours'] for r in rs]):>13s}x"
            )
    print(
        "\njaxcal / peer: medians per process, min-max over seeds; clicks: s per EM iteration"
        " (ms in the table) against the pure-Python reference's per iteration over the same"
        f" sessions.\ntotal {time.perf_counter() - t_start:.0f} s; load average at the end "
        f"{os.getloadavg()[0]:.1f}"
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
