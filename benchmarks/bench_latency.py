"""Latency as a user meets it: first calls, new sizes, new processes, cold and warm caches.

Every number is the wall time of what a user runs, ``fit`` + ``predict`` (or one metric call)
blocked with ``jax.block_until_ready``, each measured in a **fresh Python process**, so that
compiling, loading compiled programs from jaxcal's cache and importing are all counted.

Run it with ``OPENBLAS_CORETYPE`` and ``OPENBLAS_L2_SIZE`` unset, so that NumPy / SciPy's
OpenBLAS (used by scikit-learn and netcal) picks its best kernel for this CPU::

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_latency.py
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_latency.py --quick
    python benchmarks/bench_latency.py --sections 1 --only ENIR,auc --skip ENIR:100000
    python benchmarks/bench_latency.py --json latency.json     # also write every result

``--quick`` (a smoke run, a few minutes): n = 1e3 and 1e4 for Platt, isotonic, BBQ, ECE and
AUC only, 6 loop problems, and the demo with two calibrators. ``--skip NAME[:N]`` leaves out
an expensive entry point or one of its sizes (e.g. ``--skip ENIR:1e5``), ``--sections``
picks sections, ``--only`` entry points.

1. **Entry points.** For each public calibrator (``jaxcal.<Name>().fit(s, y).predict(s)``)
   and metric (``jaxcal.metrics.ece / mce / nll / brier / auc`` on probabilities and
   labels), one worker process measures, at n = 1e3, 1e4, 1e5 in increasing order: the
   first call at n (compiles that size bucket, or loads it from the cache), the same n
   again (median of ``--repeats`` calls) and a new n in the same bucket (the first of
   0.9 n, 1.05 n, 1.1 n with ``jaxcal._shapes.padded_size`` equal to that of n: a new size
   that should compile nothing). The first call at 1e4 and 1e5 is the first call *in that
   bucket*, after the smaller sizes ran in the same process (imports and size-independent
   set-up are then done). Each worker runs twice: **cold** (a fresh, empty
   ``JAXCAL_COMPILATION_CACHE`` folder per entry point) and **warm** (a new process with the
   folder the cold run filled). The cache column counts the entries each run stored: 0 in
   the cold run means that entry point's programs do not go through jaxcal's cache.
   Scores: N(0, 1); ``sigmoid`` of them for BetaCalibration and the metrics, ``exp`` for
   Gamma / Exponential; labels ~ Bernoulli(sigmoid(s)).
2. **A research-script loop.** 20 calibration problems with sizes spread over 6,000-14,000
   (shuffled, fixed seed), each calibrated (fit + predict on the same scores) with Platt,
   Gaussian, isotonic, histogram binning (15 equal-width bins) and BBQ, plus the 15-bin ECE
   of the Platt output. jaxcal (cold cache, then warm) against what a user would
   otherwise run: scikit-learn ``LogisticRegression(C=inf)`` on ``s`` (Platt) and on
   ``[s, s^2]`` (Gaussian, without jaxcal's monotonicity constraint),
   ``IsotonicRegression(out_of_bounds="clip")``, netcal ``HistogramBinning(bins=15)`` and
   ``BBQ()``, netcal ``ECE(bins=15)``. Histogram binning and BBQ get ``sigmoid(s)`` on both
   sides (netcal needs probabilities). Each contender runs in its own process; reported:
   the process wall time (interpreter, imports, data, loop), the imports and the loop alone.
   The per-problem ECEs of both sides are compared (the same unpenalised logistic fit and
   the same binning, so they agree up to the solvers' tolerances).
3. **``jaxcal demo``** as a user runs it (``jaxcal demo --out DIR``, plots included): wall
   time of the command with a cold cache, then again with the cache the first run filled.

jaxcal runs in JAX's default precision, float32, as in a user's script (``--float64`` turns
on ``jax_enable_x64``, as ``jaxcal demo`` and the other benchmarks do).
``JAX_COMPILATION_CACHE_DIR`` is removed from the workers' environment, so that only
jaxcal's own cache (and, for the demo, the JAX cache the command line keeps inside it) is
measured. A warm run that still compiles (a cache miss,
e.g. because jaxcal's source changed between the two runs) writes new entries: their count
is shown next to each warm row (and a changed source is noted). netcal imports torch at
module level; it is given the NumPy stand-in of ``bench_nonparametric.py``, which
reproduces the only torch calls on this path (BBQ's model scores).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
RESULT_TAG = "BENCH_RESULT "

SIZES = (1_000, 10_000, 100_000)
QUICK_SIZES = (1_000, 10_000)
# calibrator -> the scores it is given: real scores, (0, 1) or positive
CALIBRATORS = {
    "PlattScaling": "real",
    "TemperatureScaling": "real",
    "BetaCalibration": "unit",
    "GaussianCalibration": "real",
    "GammaCalibration": "positive",
    "ExponentialCalibration": "positive",
    "IsotonicCalibration": "real",
    "HistogramBinning": "real",
    "BBQ": "real",
    "ENIR": "real",
    "SmoothedIsotonic": "real",
}
METRICS = ("ece", "mce", "nll", "brier", "auc")
QUICK_ENTRIES = ("PlattScaling", "IsotonicCalibration", "BBQ", "ece", "auc")
LOOP_PROBLEMS, QUICK_LOOP_PROBLEMS = 20, 6
QUICK_DEMO_ARGS = ("--calibrators", "PlattScaling,BBQ")


# --------------------------------------------------------------------------- helpers
def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _setup_jax(float64: bool) -> None:
    import jax

    if float64:
        jax.config.update("jax_enable_x64", True)


def _bucket_mate(n: int) -> int:
    """A new size in the bucket of ``n``: the first of 0.9 n, 1.05 n, 1.1 n (then n - 1)."""
    from jaxcal._shapes import padded_size

    for m in (int(0.9 * n), int(1.05 * n), int(1.1 * n), n - 1):
        if m != n and padded_size(m) == padded_size(n):
            return m
    raise ValueError(f"no other size shares the bucket of n = {n}")


def _entry_inputs(name: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(n)
    s = rng.normal(size=n)
    y = (rng.uniform(size=n) < _sigmoid(s)).astype(np.int64)
    kind = "unit" if name in METRICS else CALIBRATORS[name]
    x = {"real": s, "unit": _sigmoid(s), "positive": np.exp(s)}[kind]
    return x, y


def _entry_runner(name: str):
    """``run(x, y)``: one blocked call of the entry point (imports its module now)."""
    import jax

    import jaxcal

    if name in METRICS:
        metric = getattr(jaxcal.metrics, name)
        return lambda x, y: jax.block_until_ready(metric(x, y))
    cls = getattr(jaxcal, name)
    return lambda x, y: jax.block_until_ready(cls().fit(x, y).predict(x))


def _timed(fn, *args) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def _loop_problems(count: int, seed: int = 0) -> list[tuple[np.ndarray, ...]]:
    """``count`` problems ``(s, sigmoid(s), y)`` with sizes spread over 6,000-14,000."""
    rng = np.random.default_rng(seed)
    sizes = np.linspace(6_000, 14_000, count).astype(int)
    rng.shuffle(sizes)
    problems = []
    for n in sizes:
        slope, shift = rng.uniform(0.5, 2.5), rng.uniform(-1.0, 1.0)
        s = rng.normal(size=n)
        y = (rng.uniform(size=n) < _sigmoid(slope * s + shift)).astype(np.int64)
        problems.append((s, _sigmoid(s), y))
    return problems


def _netcal():
    """netcal's HistogramBinning, BBQ and ECE, imported behind the torch stand-in."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    from bench_nonparametric import _install_torch_shim

    _install_torch_shim()
    torch = sys.modules["torch"]
    # netcal.metrics also imports torch.distributions (for its regression metrics only)
    sys.modules.setdefault("torch.distributions", torch.distributions)
    from netcal.binning import BBQ, HistogramBinning
    from netcal.metrics import ECE

    return HistogramBinning, BBQ, ECE


# --------------------------------------------------------------------------- workers
def worker_entry(name: str, sizes: list[int], repeats: int, float64: bool) -> dict:
    """Section 1 in this process: first / same n / new n at each size, in increasing order."""
    t0 = time.perf_counter()
    _setup_jax(float64)
    run = _entry_runner(name)
    imports = time.perf_counter() - t0
    from jaxcal._shapes import padded_size

    cells = []
    for n in sorted(sizes):
        m = _bucket_mate(n)
        x, y = _entry_inputs(name, n)
        x2, y2 = _entry_inputs(name, m)
        first = _timed(run, x, y)
        same = statistics.median(_timed(run, x, y) for _ in range(repeats))
        new = _timed(run, x2, y2)
        cells.append(
            {"n": n, "new_n": m, "bucket": padded_size(n), "first": first, "same": same, "new": new}
        )
    return {"imports": imports, "cells": cells, "source": _source_digest()}


def _source_digest() -> str | None:
    try:
        from jaxcal._compilation_cache import source_digest

        return source_digest()[:16]
    except Exception:  # a private helper: its absence must not break the benchmark
        return None


def worker_loop_jaxcal(count: int, float64: bool) -> dict:
    """Section 2, jaxcal's side."""
    t0 = time.perf_counter()
    _setup_jax(float64)
    import jax

    from jaxcal import BBQ, GaussianCalibration, HistogramBinning, IsotonicCalibration, PlattScaling
    from jaxcal.metrics import ece

    imports = time.perf_counter() - t0
    problems = _loop_problems(count)
    times, eces = [], []
    t_loop = time.perf_counter()
    for s, p, y in problems:
        t = time.perf_counter()
        out = (
            PlattScaling().fit(s, y).predict(s),
            GaussianCalibration().fit(s, y).predict(s),
            IsotonicCalibration().fit(s, y).predict(s),
            HistogramBinning(n_bins=15, strategy="uniform").fit(p, y).predict(p),
            BBQ().fit(p, y).predict(p),
        )
        e = ece(out[0], y, n_bins=15)
        jax.block_until_ready((out, e))
        times.append(time.perf_counter() - t)
        eces.append(float(e))
    loop = time.perf_counter() - t_loop
    return {
        "imports": imports,
        "loop": loop,
        "times": times,
        "eces": eces,
        "source": _source_digest(),
    }


def worker_loop_peers(count: int) -> dict:
    """Section 2, scikit-learn + netcal."""
    t0 = time.perf_counter()
    from sklearn.isotonic import IsotonicRegression
    from sklearn.linear_model import LogisticRegression

    NetcalHistogram, NetcalBBQ, NetcalECE = _netcal()
    imports = time.perf_counter() - t0
    problems = _loop_problems(count)
    times, eces = [], []
    t_loop = time.perf_counter()
    for s, p, y in problems:
        t = time.perf_counter()
        x1 = s[:, None]
        x2 = np.column_stack([s, s * s])
        platt = LogisticRegression(C=np.inf).fit(x1, y).predict_proba(x1)[:, 1]
        LogisticRegression(C=np.inf).fit(x2, y).predict_proba(x2)[:, 1]
        IsotonicRegression(out_of_bounds="clip").fit(s, y).predict(s)
        NetcalHistogram(bins=15).fit(p, y).transform(p)
        NetcalBBQ().fit(p, y).transform(p)
        e = NetcalECE(bins=15).measure(platt, y)
        times.append(time.perf_counter() - t)
        eces.append(float(e))
    loop = time.perf_counter() - t_loop
    return {"imports": imports, "loop": loop, "times": times, "eces": eces}


# --------------------------------------------------------------------------- parent side
def _child_env(cache: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    if cache is not None:
        env["JAXCAL_COMPILATION_CACHE"] = str(cache)
    return env


def _cache_entries(cache: Path) -> int:
    return len(list(cache.glob("*.bin"))) if cache.is_dir() else 0


def run_worker(worker_args: list[str], cache: Path | None, timeout: float) -> dict:
    """Run this script as a worker in a fresh process; its result plus the process wall time."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", *worker_args]
    before = _cache_entries(cache) if cache is not None else 0
    t0 = time.perf_counter()
    proc = subprocess.run(
        cmd, env=_child_env(cache), capture_output=True, text=True, timeout=timeout
    )
    wall = time.perf_counter() - t0
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(RESULT_TAG)]
    if proc.returncode != 0 or not lines:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        raise RuntimeError(f"worker {' '.join(worker_args)} failed (rc {proc.returncode}):\n{tail}")
    result = json.loads(lines[-1][len(RESULT_TAG) :])
    result["process"] = wall
    if cache is not None:
        result["cache_written"] = _cache_entries(cache) - before
    return result


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return f"{'-':>9s}"
    ms = seconds * 1e3
    return f"{ms:9,.1f}" if ms < 100 else f"{ms:9,.0f}"


def section_entries(args, tmp: Path, results: dict) -> None:
    names = args.only or (list(QUICK_ENTRIES) if args.quick else [*CALIBRATORS, *METRICS])
    sizes = args.sizes or list(QUICK_SIZES if args.quick else SIZES)
    print(
        "\n== 1. entry points: one fresh process per entry point and cache state; ms per "
        "blocked call (fit + predict, or the metric)\n"
        f"   sizes in increasing order within a process ({', '.join(f'{n:,}' for n in sizes)})"
        ": 'first' at the larger sizes is the first call in that size bucket, after the "
        "smaller sizes ran\n   'same' = median of "
        f"{args.repeats} further calls at n; 'new n' = one call at another size in n's bucket",
        flush=True,
    )
    rows: dict[str, dict] = {}
    for name in names:
        run_sizes = [
            n for n in sizes if (name, n) not in args.skip and (name, None) not in args.skip
        ]
        if not run_sizes:
            continue
        cache = tmp / f"entry-{name}"
        worker = ["entry", "--name", name, "--sizes", ",".join(map(str, run_sizes))]
        worker += ["--repeats", str(args.repeats)] + (["--float64"] if args.float64 else [])
        rows[name] = {}
        for mode in ("cold", "warm"):
            try:
                res = run_worker(worker, cache, args.worker_timeout)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                print(f"   [{mode}] {name}: FAILED {exc}", flush=True)
                res = None
            rows[name][mode] = res
            if res is not None:
                what = "misses written" if mode == "warm" else "entries written"
                print(
                    f"   [{mode}] {name:<24s} process {res['process']:6.1f} s (imports "
                    f"{res['imports']:.1f} s); cache {what}: {res['cache_written']}",
                    flush=True,
                )
    results["entries"] = rows
    for mode in ("cold", "warm"):
        _print_entry_table(rows, sizes, mode)
    for name, row in rows.items():
        cold, warm = row.get("cold"), row.get("warm")
        if cold and warm and cold["source"] != warm["source"]:
            print(f"   note: jaxcal's source changed between the cold and warm {name} runs")


def _print_entry_table(rows: dict, sizes: list[int], mode: str) -> None:
    title = {
        "cold": "cold cache (an empty JAXCAL_COMPILATION_CACHE folder)",
        "warm": "warm cache (a new process, the folder the cold run filled)",
    }[mode]
    cache_col = "written" if mode == "cold" else "misses"
    print(f"\n   {title}: ms")
    head = f"   {'entry point':<24s}"
    sub = f"   {'':<24s}"
    for n in sizes:
        head += f" |{f'n = {n:,}':^29s}"
        sub += f" |{'first':>9s} {'same':>9s} {'new n':>9s}"
    print(f"{head} | {'process':>8s} {'cache':>7s}")
    print(f"{sub} | {'s':>8s} {cache_col:>7s}")
    for name, row in rows.items():
        res = row.get(mode)
        line = f"   {name:<24s}"
        cells = {c["n"]: c for c in res["cells"]} if res else {}
        for n in sizes:
            c = cells.get(n, {})
            line += f" |{_ms(c.get('first'))} {_ms(c.get('same'))} {_ms(c.get('new'))}"
        if res:
            line += f" | {res['process']:8.1f} {res['cache_written']:7d}"
        else:
            line += f" | {'failed':>8s}"
        print(line)
    mates = {c["n"]: c for r in rows.values() if r.get(mode) for c in r[mode]["cells"]}
    if mates:
        text = ", ".join(
            f"{n:,} -> new n {c['new_n']:,} (bucket {c['bucket']:,})"
            for n, c in sorted(mates.items())
        )
        print(f"   sizes: {text}")


def section_loop(args, tmp: Path, results: dict) -> None:
    count = args.problems or (QUICK_LOOP_PROBLEMS if args.quick else LOOP_PROBLEMS)
    print(
        f"\n== 2. research-script loop: {count} problems, sizes 6,000-14,000 (shuffled), "
        "each calibrated with Platt, Gaussian, isotonic, histogram binning (15 bins), BBQ, "
        "+ ECE (15 bins) of the Platt output; one fresh process per row",
        flush=True,
    )
    cache = tmp / "loop"
    flag = ["--float64"] if args.float64 else []
    runs = {
        "jaxcal, cold cache": (["loop-jaxcal", "--problems", str(count), *flag], cache),
        "jaxcal, warm cache": (["loop-jaxcal", "--problems", str(count), *flag], cache),
        "scikit-learn + netcal": (["loop-peers", "--problems", str(count)], None),
    }
    rows = {}
    for label, (worker, folder) in runs.items():
        try:
            rows[label] = run_worker(worker, folder, args.worker_timeout)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            print(f"   {label}: FAILED {exc}", flush=True)
            continue
        r = rows[label]
        extra = "" if folder is None else f"; cache entries written: {r['cache_written']}"
        print(f"   {label:<24s} process {r['process']:6.1f} s, loop {r['loop']:6.2f} s{extra}")
    results["loop"] = rows
    print(
        f"\n   {'contender':<24s} {'process s':>10s} {'imports s':>10s} {'loop s':>8s} "
        f"{'1st problem s':>14s} {'median other s':>15s}"
    )
    for label, r in rows.items():
        print(
            f"   {label:<24s} {r['process']:10.2f} {r['imports']:10.2f} {r['loop']:8.2f} "
            f"{r['times'][0]:14.3f} {statistics.median(r['times'][1:] or r['times']):15.3f}"
        )
    cold, warm = rows.get("jaxcal, cold cache"), rows.get("jaxcal, warm cache")
    if cold and warm and cold["source"] != warm["source"]:
        print("   note: jaxcal's source changed between the cold and warm runs")
    peers = rows.get("scikit-learn + netcal")
    for label in ("jaxcal, cold cache", "jaxcal, warm cache"):
        ours = rows.get(label)
        if peers and ours:
            print(
                f"   scikit-learn + netcal / {label}: loop {peers['loop'] / ours['loop']:.2f}x, "
                f"process {peers['process'] / ours['process']:.2f}x"
            )
    if peers and rows.get("jaxcal, warm cache"):
        diff = np.abs(np.subtract(rows["jaxcal, warm cache"]["eces"], peers["eces"])).max()
        print(
            f"   ECE of the Platt outputs, max |jaxcal - netcal| over problems: {diff:.2e} "
            "(scikit-learn's lbfgs stops at tol = 1e-4)"
        )


def _jaxcal_command() -> list[str]:
    exe = Path(sys.executable).with_name("jaxcal")
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-c", "import sys; from jaxcal.cli import main; sys.exit(main())"]


def section_demo(args, tmp: Path, results: dict) -> None:
    extra = list(QUICK_DEMO_ARGS) if args.quick else []
    cache = tmp / "demo-cache"
    print(
        f"\n== 3. jaxcal demo{' ' + ' '.join(extra) if extra else ''} --out DIR "
        "(plots included): wall time of the command",
        flush=True,
    )
    rows = {}
    for mode in ("cold", "warm"):
        out = tmp / f"demo-{mode}"
        cmd = [*_jaxcal_command(), "demo", *extra, "--out", str(out)]
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(
                cmd,
                env=_child_env(cache),
                capture_output=True,
                text=True,
                timeout=args.worker_timeout,
            )
        except subprocess.TimeoutExpired:
            print(f"   [{mode}] timed out after {args.worker_timeout:.0f} s", flush=True)
            continue
        wall = time.perf_counter() - t0
        if proc.returncode != 0 or not (out / "results.csv").exists():
            tail = "\n".join(proc.stderr.strip().splitlines()[-10:])
            print(f"   [{mode}] FAILED (rc {proc.returncode}):\n{tail}", flush=True)
            continue
        plots = len(list(out.glob("*.png")))
        rows[mode] = {"wall": wall, "plots": plots, "cache_entries": _cache_entries(cache)}
        print(
            f"   [{mode}] {wall:7.1f} s ({plots} plots written; jaxcal cache entries now "
            f"{rows[mode]['cache_entries']})",
            flush=True,
        )
    if "cold" in rows and "warm" in rows:
        print(f"   cold / warm: {rows['cold']['wall'] / rows['warm']['wall']:.2f}x")
    results["demo"] = {"command_args": extra, **rows}


def machine_info() -> dict:
    info: dict = {"python": platform.python_version()}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        fields = dict(ln.split(":", 1) for ln in out.splitlines() if ":" in ln)
        info["cpu"] = fields.get("Model name", "").strip() or platform.processor()
        info["cores"] = fields.get("CPU(s)", "").strip() or str(os.cpu_count())
    except OSError:  # not Linux
        info["cpu"], info["cores"] = platform.processor(), str(os.cpu_count())
    info["load_average"] = [round(v, 2) for v in os.getloadavg()]
    for pkg in ("jaxcal", "jax", "jaxlib", "numpy", "scipy", "scikit-learn", "netcal"):
        try:
            info[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            info[pkg] = "not installed"
    try:
        git = ["git", "-C", str(HERE.parent)]
        head = subprocess.run(
            [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        )
        dirty = subprocess.run(
            [*git, "status", "--porcelain", "--", "jaxcal"], capture_output=True, text=True
        )
        if head.returncode == 0:
            info["commit"] = head.stdout.strip() + (" + local changes" if dirty.stdout else "")
    except OSError:
        pass
    try:
        import scipy.linalg  # noqa: F401  (loads SciPy's BLAS too)
        from threadpoolctl import threadpool_info

        info["blas"] = [
            {k: lib.get(k) for k in ("filepath", "internal_api", "version", "architecture")}
            | {"threads": lib.get("num_threads")}
            for lib in threadpool_info()
            if lib.get("user_api") == "blas"
        ]
    except ImportError:
        info["blas"] = None
    info["env"] = {
        k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE") if k in os.environ
    }
    return info


def print_machine(info: dict) -> None:
    load = " ".join(f"{v:.1f}" for v in info["load_average"])
    print(f"machine: {info['cpu']}, {info['cores']} CPU(s); load average {load}")
    print(
        "versions: "
        + ", ".join(
            f"{k} {info[k]}"
            for k in ("jaxcal", "jax", "jaxlib", "numpy", "scipy", "scikit-learn", "netcal")
        )
        + f"; Python {info['python']}"
        + (f"; jaxcal source {info['commit']}" if "commit" in info else "")
    )
    if info["blas"] is None:
        print("BLAS: threadpoolctl not installed")
    for lib in info["blas"] or []:
        owner = (
            "numpy"
            if "numpy" in lib["filepath"]
            else "scipy"
            if "scipy" in lib["filepath"]
            else "?"
        )
        print(
            f"BLAS ({owner}): {lib['internal_api']} {lib['version']}, kernel "
            f"{lib['architecture']}, {lib['threads']} threads"
        )
    for key, value in info["env"].items():
        print(f"warning: {key}={value} is set (run with env -u {key} for the best kernel)")


# --------------------------------------------------------------------------- command line
def _skip_list(text: str) -> tuple[str, int | None]:
    name, _, size = text.partition(":")
    return name, int(float(size)) if size else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke run: n = 1e3, 1e4; {', '.join(QUICK_ENTRIES)}; "
        f"{QUICK_LOOP_PROBLEMS} loop problems; demo with 2 calibrators",
    )
    ap.add_argument("--sections", default="1,2,3", help="which sections to run (default 1,2,3)")
    ap.add_argument("--only", type=lambda t: t.split(","), help="entry points of section 1")
    ap.add_argument(
        "--sizes",
        type=lambda t: [int(float(v)) for v in t.split(",")],
        help="sizes of section 1 (default 1e3,1e4,1e5)",
    )
    ap.add_argument(
        "--skip",
        type=_skip_list,
        action="append",
        default=[],
        metavar="NAME[:N]",
        help="skip an entry point, or one size of it (e.g. ENIR:1e5); repeatable",
    )
    ap.add_argument("--repeats", type=int, default=3, help="calls behind each 'same n' median")
    ap.add_argument("--problems", type=int, help="problems in the loop of section 2 (default 20)")
    ap.add_argument("--float64", action="store_true", help="turn on jax_enable_x64")
    ap.add_argument("--worker-timeout", type=float, default=1800.0, help="seconds per process")
    ap.add_argument("--json", type=Path, help="write every result to this file")
    ap.add_argument(
        "--worker", choices=("entry", "loop-jaxcal", "loop-peers"), help=argparse.SUPPRESS
    )
    ap.add_argument("--name", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker:
        if args.worker == "entry":
            res = worker_entry(args.name, args.sizes, args.repeats, args.float64)
        elif args.worker == "loop-jaxcal":
            res = worker_loop_jaxcal(args.problems, args.float64)
        else:
            res = worker_loop_peers(args.problems)
        print(RESULT_TAG + json.dumps(res), flush=True)
        return

    unknown = set(args.only or []) - {*CALIBRATORS, *METRICS}
    if unknown:
        ap.error(f"unknown entry points {sorted(unknown)}; choose from {[*CALIBRATORS, *METRICS]}")
    args.skip = set(args.skip)
    info = machine_info()
    print_machine(info)
    print(
        f"precision: {'float64' if args.float64 else 'float32'}; mode: "
        f"{'quick (smoke sizes)' if args.quick else 'full'}",
        flush=True,
    )
    results: dict = {"machine": info, "quick": args.quick, "float64": args.float64}
    sections = {int(s) for s in args.sections.split(",")}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="jaxcal-latency-") as tmp:
        if 1 in sections:
            section_entries(args, Path(tmp), results)
        if 2 in sections:
            section_loop(args, Path(tmp), results)
        if 3 in sections:
            section_demo(args, Path(tmp), results)
    print(
        f"\ntotal {time.perf_counter() - t0:.0f} s; load average at the end "
        f"{' '.join(f'{v:.1f}' for v in os.getloadavg())}"
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
        print(f"results written to {args.json}")


if __name__ == "__main__":
    main()
