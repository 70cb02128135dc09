"""The device suite: every accelerated path of jaxcal on one device, with the bandwidth reached.

    python benchmarks/bench_device.py                     # full sizes (an H100 / H200 class GPU)
    python benchmarks/bench_device.py --quick             # tiny sizes: a smoke run on a CPU
    python benchmarks/bench_device.py --scale 0.1 --only platt_batch,isotonic_grouped
    python benchmarks/bench_device.py --json device.json  # also write the rows as JSON

Workloads (public API only; ``--only`` takes their names, comma-separated):

* ``platt_batch``, ``gaussian_batch``: ``PlattScaling().fit_batch`` /
  ``GaussianCalibration().fit_batch`` on ``[B, n]`` scores (4,096 x 4,096 at scale 1), then
  ``predict`` on ``[B, n]`` test scores. A call includes the estimator's eager validation
  and score transform (NumPy, float64, on the host) and the transfers.
* ``platt_vmap``, ``gaussian_vmap``: the same problems through the functional core,
  ``jax.jit(jax.vmap(...))`` of ``jaxcal.functional.fit`` + ``predict``: the device work
  alone (the same numbers).
* ``isotonic_grouped``: ``jaxcal.isotonic_regression(x, y, group=g)`` inside ``jax.jit``
  (1e7 points, 1e4 groups): the pure-JAX merge tree on GPUs and TPUs, the compiled PAV
  kernel in CPU programs (the function picks per program).
* ``venn_abers``: ``jaxcal.VennAbers().fit`` on a calibration set + ``predict`` on as many
  test scores (1e6 at scale 1). Its sweeps are sequential loops (one step per point) and
  its sort runs on the host, so on an accelerator the size is capped: a warm call at
  2**14 points is timed first and the size is lowered (by halving) until the estimated warm
  call takes at most 5 s; the table shows the size used.
* ``clicks_pbm``, ``clicks_dbn``: ``PBM`` / ``DBN`` (a cascade model) EM on a log simulated
  by ``jaxcal.clicks.simulate`` (1e7 sessions x 10 results at scale 1), through the pure
  core: the log is encoded once on the host (``jaxcal.clicks.encode_sessions``, not
  deduplicated: every session is on the device), and a call is ``fit_arrays(model, arrays,
  max_iter=20, tol=None)`` (exactly 20 EM iterations) + ``predict_marginal`` in one
  ``jax.jit``. The estimators' ``fit`` runs the same loop after its host work (deduplication
  and the encoding of the pairs, a sort of the ``S x n`` pair keys on every call), which at
  this size would take longer than the EM itself.
* ``bpr_sweep``: ``jaxcal.recsys.sweep`` of ``BPRMF`` (64 factors, Adam, 1,000 steps of
  4,096 triples) over 4 learning rates x 2 penalties (K = 8 models in one ``vmap``-ed
  program) on 2e6 random positives of 1e5 users x 5e4 items, then ``score`` of 1e5 pairs.
* ``cmtrf_grid``: ``jaxcal.recsys.CMTRF`` (global transform, rank 16) over a 3 x 3 grid of
  penalties, 20 sweeps per point (``patience=20``: no early stop), on ratings of 4,096 users
  x 2,048 items at density 0.05 from ``jaxcal.data.simulate_ratings``, then ``predict``.

Reported per workload: the first call (compiling: the script points jaxcal's compilation
cache at an empty folder) and the median of the warm calls (at least one, up to
``--repeats``, fewer when they would take more than ``--budget`` seconds), fit + predict (or
the sweep + score), blocked with ``jax.block_until_ready``.

**Bytes moved** are a lower bound on the device memory traffic of one warm call: the bytes
of the arrays each pass of the algorithm must read and write, times the number of passes it
makes (counted from the result where it reports them: Newton and EM iterations, sweeps).
Scratch traffic inside a pass (sorts' intermediate rounds, gathers, scatter-adds into
tables, work arrays that XLA does not fuse) is not counted, so the GB/s column is what the
workload reached at least, and the percentage a lower bound on its share of the peak. The
rule of each workload is printed under the table and stored in the JSON. float32 data and
clicks, int32 ids, bool masks.

**Peak bandwidth**: from a table of device kinds (HBM bandwidth of the data sheet: H100 SXM
3.35 TB/s, H100 PCIe 2.0 TB/s, H200 4.8 TB/s, A100 80GB 2.0 TB/s, ...) where the device is in
it, else (CPUs, unknown devices) the bandwidth of a jitted ``x + 1`` over a large float32
array (1 GiB; 64 MiB on a CPU), measured on the spot (read + write, the best of 10 calls).
Both are reported, and which one the percentages use. On a CPU the quick sizes fit in the
caches, so a workload can pass 100% of the measured copy.

Sizes scale with ``--scale`` (problems, points, sessions, users, items and BPR's triples per
step; not the number of iterations, steps or grid points); ``--quick`` uses tiny sizes (a
CPU smoke run).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

GB = 1e9

# Data-sheet HBM bandwidth, bytes/s, by lower-cased ``device_kind``: the first row all of
# whose fragments occur in the name wins (GH200 before H200; PCIe / NVL before plain H100).
PEAK_BANDWIDTH: tuple[tuple[tuple[str, ...], float | None, str], ...] = (
    (("gh200",), None, "GH200 (96 or 144 GB: not in the table)"),
    (("h200",), 4.8e12, "H200"),
    (("h100", "pcie"), 2.0e12, "H100 PCIe"),
    (("h100", "nvl"), 3.9e12, "H100 NVL"),
    (("h100",), 3.35e12, "H100 SXM"),
    (("h800", "pcie"), 2.0e12, "H800 PCIe"),
    (("h800",), 3.35e12, "H800 SXM"),
    (("a100", "80gb", "pcie"), 1.935e12, "A100 80GB PCIe"),
    (("a100", "80gb"), 2.039e12, "A100 80GB SXM"),
    (("a100",), 1.555e12, "A100 40GB"),
    (("l40s",), 0.864e12, "L40S"),
    (("l40",), 0.864e12, "L40"),
    (("l4",), 0.3e12, "L4"),
    (("a10g",), 0.6e12, "A10G"),
    (("a10",), 0.6e12, "A10"),
    (("v100",), 0.9e12, "V100"),
    (("t4",), 0.32e12, "T4"),
    (("tpu v6",), 1.64e12, "TPU v6e"),
    (("tpu v5 lite",), 0.819e12, "TPU v5e"),
    (("tpu v5e",), 0.819e12, "TPU v5e"),
    (("tpu v5",), 2.765e12, "TPU v5p"),
    (("tpu v4",), 1.2e12, "TPU v4"),
)

WORKLOADS = (
    "platt_batch",
    "platt_vmap",
    "gaussian_batch",
    "gaussian_vmap",
    "isotonic_grouped",
    "venn_abers",
    "clicks_pbm",
    "clicks_dbn",
    "bpr_sweep",
    "cmtrf_grid",
)


@dataclasses.dataclass(frozen=True)
class Sizes:
    """Problem sizes of one run (scale 1: the full suite)."""

    problems: int = 4096  # parametric fit_batch: problems ...
    points: int = 4096  # ... of this many scores each
    iso_points: int = 10_000_000
    iso_groups: int = 10_000
    va_points: int = 1_000_000
    sessions: int = 10_000_000
    em_iter: int = 20
    users: int = 100_000
    items: int = 50_000
    positives: int = 2_000_000
    bpr_dim: int = 64
    bpr_steps: int = 1000
    bpr_batch: int = 4096
    bpr_lrs: tuple[float, ...] = (0.003, 0.01, 0.03, 0.1)
    bpr_l2s: tuple[float, ...] = (1e-4, 1e-3)
    score_pairs: int = 100_000
    rating_users: int = 4096
    rating_items: int = 2048
    rating_density: float = 0.05
    cmtrf_rank: int = 16
    cmtrf_sweeps: int = 20
    cmtrf_l2s: tuple[float, ...] = (0.1, 1.0, 10.0)

    def scaled(self, scale: float) -> Sizes:
        """Counts times ``scale`` (rating users and items times its square root, so that the
        number of ratings scales with it; BPR's triples per step too); iterations, steps and
        grids unchanged."""

        def times(v: int, least: int, factor: float = scale) -> int:
            return max(least, int(round(v * factor)))

        root = math.sqrt(scale)
        return dataclasses.replace(
            self,
            problems=times(self.problems, 2),
            iso_points=times(self.iso_points, 100),
            iso_groups=times(self.iso_groups, 2),
            va_points=times(self.va_points, 100),
            sessions=times(self.sessions, 100),
            users=times(self.users, 20),
            items=times(self.items, 20),
            positives=times(self.positives, 200),
            bpr_batch=times(self.bpr_batch, 64),
            score_pairs=times(self.score_pairs, 10),
            rating_users=times(self.rating_users, 20, root),
            rating_items=times(self.rating_items, 20, root),
        )


QUICK = Sizes(
    problems=64,
    points=256,
    iso_points=20_000,
    iso_groups=100,
    va_points=4000,
    sessions=20_000,
    em_iter=5,
    users=300,
    items=200,
    positives=3000,
    bpr_dim=16,
    bpr_steps=50,
    bpr_batch=256,
    bpr_lrs=(0.01, 0.03),
    bpr_l2s=(1e-4, 1e-3),
    score_pairs=100,
    rating_users=100,
    rating_items=80,
    rating_density=0.1,
    cmtrf_rank=4,
    cmtrf_sweeps=3,
    cmtrf_l2s=(0.1, 1.0),
)


@dataclasses.dataclass
class Case:
    """One workload, ready to time: ``call()`` runs it (fit + predict) and returns arrays;
    ``moved(out)`` the bytes a warm call moves at least (from the result's pass counts)."""

    name: str
    size: str
    call: Callable[[], Any]
    moved: Callable[[Any], float]
    counted: str  # how the bytes are counted


def _log(msg: str) -> None:
    print(f"[bench_device] {msg}", file=sys.stderr, flush=True)


def _si(v: float) -> str:
    """1e7 -> '1e7', 4096 -> '4,096', 2**20 -> '1.05e6'."""
    if v >= 1e5:
        mant, exp = f"{v:.2e}".split("e")
        mant = mant.rstrip("0").rstrip(".")
        return f"{mant}e{int(exp)}"
    return f"{int(v):,}"


# ----------------------------------------------------------------------------- workloads


def parametric_case(name: str, estimator: Any, sz: Sizes, *, pure: bool) -> Case:
    """``fit_batch`` + ``predict`` (the estimator: validated on the host, then the lock-step
    solver), or with ``pure`` the functional core ``jit(vmap(fit, predict))``: device work
    alone."""
    import jax

    from jaxcal import functional

    rng = np.random.default_rng(0)
    b, n = sz.problems, sz.points
    labels = (rng.uniform(size=(b, n)) < 0.3).astype(np.float32)
    # class-conditional Gaussian scores with a per-problem shift: every problem has its own map
    shift = rng.normal(0.0, 0.5, (b, 1))
    scores = np.where(labels == 1, rng.normal(1.0, 0.8, (b, n)), rng.normal(0.0, 1.2, (b, n)))
    scores = (scores + shift).astype(np.float32)
    test = (rng.normal(0.3, 1.2, (b, n)) + shift).astype(np.float32)
    s, y, t = jax.device_put((scores, labels, test))

    @jax.jit
    @jax.vmap
    def fit_predict(s, y, t):
        fitted = functional.fit(estimator, s, y)
        return functional.predict(fitted, t), fitted.status.n_iter

    def call():
        if pure:
            return fit_predict(s, y, t)
        fitted = estimator.fit_batch(s, y)
        return fitted.predict(t), fitted.status.n_iter

    def moved(out) -> float:
        n_iter = np.asarray(out[1], np.int64)
        # per problem: standardisation + initial objective + one pass per Newton step, each
        # reading scores and labels (8 B/point); predict reads and writes 8 B/test point
        return float(np.sum(n_iter + 2) * n * 8 + b * n * 8)

    return Case(
        name,
        f"{b:,} x {n:,}",
        call,
        moved,
        "fit: (Newton steps + 2) passes per problem over scores + labels (8 B/point: the "
        "standardisation, the initial objective, one per step; line-search evaluations not "
        "counted); predict: test scores read + probabilities written (8 B/point)",
    )


def isotonic_case(sz: Sizes) -> Case:
    import jax

    import jaxcal

    rng = np.random.default_rng(1)
    n = sz.iso_points
    x = rng.normal(size=n).astype(np.float32)
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-2 * x))).astype(np.float32)
    g = rng.integers(0, sz.iso_groups, n).astype(np.int32)
    x, y, g = jax.device_put((x, y, g))
    fit = jax.jit(lambda x, y, g: jaxcal.isotonic_regression(x, y, group=g))

    return Case(
        "isotonic_grouped",
        f"{_si(n)} pts / {_si(sz.iso_groups)} groups",
        lambda: fit(x, y, g),
        lambda out: float(2 * n * 16),
        "2 passes (the sort, the PAV) over x, y, group read + fitted values written "
        "(16 B/point); the sort's rounds and the merge tree's log2(n) levels not counted",
    )


def venn_abers_case(sz: Sizes) -> Case:
    import jax

    import jaxcal

    rng = np.random.default_rng(2)

    def data(n: int):
        s = rng.normal(size=n).astype(np.float32)
        y = (rng.uniform(size=n) < 1 / (1 + np.exp(-2 * s))).astype(np.float32)
        t = rng.normal(size=n).astype(np.float32)
        return jax.device_put((s, y, t))

    def run(s, y, t):
        return jaxcal.VennAbers().fit(s, y).predict(t)

    n = sz.va_points
    probe = 2**14
    if jax.default_backend() != "cpu" and n > probe:
        s, y, t = data(probe)
        jax.block_until_ready(run(s, y, t))  # compile
        start = time.perf_counter()
        jax.block_until_ready(run(s, y, t))
        per_point = (time.perf_counter() - start) / probe
        while n > probe and n * per_point > 5.0:
            n //= 2
        if n != sz.va_points:
            _log(
                f"venn_abers: {per_point * 1e6:.1f} us per point at {probe:,}; size lowered "
                f"from {sz.va_points:,} to {n:,} (estimated warm call <= 5 s)"
            )
    s, y, t = data(n)
    return Case(
        "venn_abers",
        f"n = {_si(n)}, m = {_si(n)}",
        lambda: run(s, y, t),
        lambda out: float(n * 8 * 5 + n * 8),
        "fit: scores + labels read once and 4 sweeps (two orientations x two) over the "
        "cumulative sums (8 B/point each); predict: test scores read + probabilities "
        "written (8 B/point). The sort runs on the host; the sweeps are sequential",
    )


_LOGS: dict[int, Any] = {}


def click_log(n_sessions: int):
    """The encoded log of one simulated log per size, shared by the click workloads: PBM
    sessions of 1,000 queries x 30 documents, 10 shown in random order (simulated on the
    device; ground truth drawn with NumPy), encoded on the host once."""
    if n_sessions not in _LOGS:
        import jax

        from jaxcal import clicks

        rng = np.random.default_rng(3)
        truth = {
            "alpha": np.clip(rng.beta(1.0, 2.5, (1000, 30)), 0.02, 0.98),
            "gamma": 0.95 / np.arange(1, 11) ** 0.7,
        }
        log = clicks.simulate("PBM", truth, n_sessions, key=jax.random.key(3))
        _LOGS[n_sessions] = jax.device_put(clicks.encode_sessions(log)[0])
    return _LOGS[n_sessions]


def clicks_case(name: str, model: str, sz: Sizes) -> Case:
    import jax

    from jaxcal import clicks

    arrays = click_log(sz.sessions)
    estimator = getattr(clicks, model)()
    S, n = arrays.pair_ids.shape

    @jax.jit
    def fit_predict(a):
        result = clicks.fit_arrays(estimator, a, max_iter=sz.em_iter, tol=None)
        return clicks.predict_marginal(estimator, result.params, a), result.n_iter

    def moved(out) -> float:
        per_pass = S * n * (4 + 4 + 1) + S * 4  # pair ids, clicks, mask; session weights
        return float(int(out[1]) * per_pass + S * n * (4 + 1 + 4))

    return Case(
        name,
        f"{_si(S)} sessions x {n}",
        lambda: fit_predict(arrays),
        moved,
        "one pass per EM iteration over pair ids, clicks, mask (9 B/result) and session "
        "weights (4 B/session); predict: pair ids and mask read, probabilities written "
        "(9 B/result); scatter-adds into the parameter tables not counted",
    )


def bpr_case(sz: Sizes) -> Case:
    import jax

    from jaxcal.recsys import BPRMF, sweep

    rng = np.random.default_rng(4)
    U, I = sz.users, sz.items
    popularity = 1.0 / (np.arange(I) + 10.0) ** 0.8  # Zipf-like item popularity
    items = rng.choice(I, sz.positives, p=popularity / popularity.sum())
    users = rng.integers(0, U, sz.positives)
    pairs = np.unique(users.astype(np.int64) * I + items)
    users, items = (pairs // I).astype(np.int32), (pairs % I).astype(np.int32)
    test_u = rng.integers(0, U, sz.score_pairs).astype(np.int32)
    test_i = rng.integers(0, I, sz.score_pairs).astype(np.int32)
    model = BPRMF(rank=sz.bpr_dim, n_steps=sz.bpr_steps, batch_size=sz.bpr_batch)
    grid = {"learning_rate": list(sz.bpr_lrs), "l2": list(sz.bpr_l2s)}
    K = len(sz.bpr_lrs) * len(sz.bpr_l2s)

    def call():
        result = sweep(
            model, (users, items), key=jax.random.key(0), grid=grid, n_users=U, n_items=I
        )
        return result.predict(test_u, test_i)

    table = (U + I) * sz.bpr_dim * 4
    return Case(
        "bpr_sweep",
        f"K={K}, {_si(U)} x {_si(I)}, {_si(len(users))} pos, d={sz.bpr_dim}, "
        f"{sz.bpr_steps} x {sz.bpr_batch:,} triples",
        call,
        lambda out: float(K * sz.bpr_steps * table * 6 + K * sz.score_pairs * 4),
        "per model and step, Adam reads and writes the factor tables and both moments "
        "(6 x (users + items) x dim x 4 B); the dense gradient and the sampled triples not "
        "counted",
    )


def cmtrf_case(sz: Sizes) -> Case:
    import jax

    from jaxcal.data import simulate_ratings
    from jaxcal.recsys import CMTRF, Search

    sim = simulate_ratings(
        "sd1",
        n_users=sz.rating_users,
        n_items=sz.rating_items,
        rank=5,
        density=sz.rating_density,
        key=jax.random.key(5),
    )
    ratings = sim.ratings
    n_ratings = len(ratings.user)
    n_val = int(round(0.1 * n_ratings))  # validation_fraction (the default 0.1)
    n_train = n_ratings - n_val
    model = CMTRF(
        transform="global",
        rank=sz.cmtrf_rank,
        max_iter=sz.cmtrf_sweeps,
        patience=sz.cmtrf_sweeps,
    )
    search = Search(l2_user=list(sz.cmtrf_l2s), l2_item=list(sz.cmtrf_l2s))
    points = len(sz.cmtrf_l2s) ** 2
    U, I, r = sz.rating_users, sz.rating_items, sz.cmtrf_rank

    def call():
        fitted = model.fit(ratings, key=jax.random.key(0), search=search)
        return fitted.predict(ratings.user, ratings.item), fitted.validation_mse

    def moved(out) -> float:
        sweeps = int(np.sum(np.isfinite(np.asarray(out[1]))))  # every point runs as many
        per_sweep = 2 * n_train * 12 + n_val * 12 + 2 * (U + I) * r * 4
        return float(points * sweeps * per_sweep + n_ratings * 12)

    return Case(
        "cmtrf_grid",
        f"{points} pts, {_si(U)} x {_si(I)}, {_si(n_ratings)} ratings, {sz.cmtrf_sweeps} sweeps",
        call,
        moved,
        "per grid point and sweep: the training ratings (user, item, value: 12 B) read by "
        "each ALS half-step, the validation ratings once, both factor tables read and "
        "written; predict: 12 B per rating. The dense rating mask of the GPU path not counted",
    )


def build(name: str, sz: Sizes) -> Case:
    import jaxcal

    if name in ("platt_batch", "platt_vmap"):
        return parametric_case(name, jaxcal.PlattScaling(), sz, pure=name == "platt_vmap")
    if name in ("gaussian_batch", "gaussian_vmap"):
        estimator = jaxcal.GaussianCalibration()
        return parametric_case(name, estimator, sz, pure=name == "gaussian_vmap")
    if name == "isotonic_grouped":
        return isotonic_case(sz)
    if name == "venn_abers":
        return venn_abers_case(sz)
    if name == "clicks_pbm":
        return clicks_case(name, "PBM", sz)
    if name == "clicks_dbn":
        return clicks_case(name, "DBN", sz)
    if name == "bpr_sweep":
        return bpr_case(sz)
    if name == "cmtrf_grid":
        return cmtrf_case(sz)
    raise ValueError(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}.")


# ----------------------------------------------------------------------------- measuring


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    import jax

    start = time.perf_counter()
    out = jax.block_until_ready(fn())
    return time.perf_counter() - start, out


def copy_bandwidth(n_bytes: int, repeats: int = 10) -> float:
    """Bytes/s of a jitted ``x + 1`` over a float32 array of ``n_bytes`` (read + write), the
    best of ``repeats`` calls."""
    import jax
    import jax.numpy as jnp

    x = jnp.zeros(n_bytes // 4, jnp.float32)
    add = jax.jit(lambda a: a + 1.0)
    jax.block_until_ready(add(x))
    times = [timed(lambda: add(x))[0] for _ in range(repeats)]
    return 2 * x.size * 4 / min(times)


def peak_from_table(kind: str) -> tuple[float | None, str | None]:
    name = kind.lower()
    for fragments, peak, label in PEAK_BANDWIDTH:
        if all(f in name for f in fragments):
            return peak, label
    return None, None


def measure(case: Case, repeats: int, budget: float) -> dict:
    first, out = timed(case.call)
    warm: list[float] = []
    while len(warm) < max(1, repeats) and (not warm or sum(warm) + warm[-1] <= budget):
        seconds, out = timed(case.call)
        warm.append(seconds)
    return {
        "workload": case.name,
        "size": case.size,
        "first_s": first,
        "warm_s": statistics.median(warm),
        "warm_calls": len(warm),
        "bytes": case.moved(out),
        "bytes_counted": case.counted,
    }


def fmt(v: float) -> str:
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    if v >= 0.01:
        return f"{v:.3f}".rstrip("0").rstrip(".") if v < 1 else f"{v:.2f}"
    return f"{v:.2e}"


def markdown(report: dict) -> str:
    lines = [
        "| device | workload | size | first call s | warm s | GB moved | GB/s | % of peak |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in report["rows"]:
        lines.append(
            f"| {report['device']} | {row['workload']} | {row['size']} | {fmt(row['first_s'])} "
            f"| {fmt(row['warm_s'])} | {fmt(row['bytes'] / GB)} | {fmt(row['gb_per_s'])} "
            f"| {fmt(row['percent_of_peak'])} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes (a CPU smoke run)")
    p.add_argument("--scale", type=float, default=1.0, help="multiplies the problem sizes")
    p.add_argument("--only", help=f"comma-separated subset of: {', '.join(WORKLOADS)}")
    p.add_argument("--json", metavar="PATH", help="write the report as JSON")
    p.add_argument("--repeats", type=int, default=3, help="warm calls per workload (most)")
    p.add_argument("--budget", type=float, default=30.0, help="seconds of warm calls (most)")
    args = p.parse_args(argv)
    names = WORKLOADS if not args.only else tuple(s.strip() for s in args.only.split(","))
    unknown = sorted(set(names) - set(WORKLOADS))
    if unknown:
        p.error(f"unknown workloads {unknown}; choose from {', '.join(WORKLOADS)}")
    if not args.scale > 0:
        p.error(f"--scale must be positive; got {args.scale}")

    # an empty compilation cache, so that the first call compiles (set before jaxcal loads)
    cache = tempfile.mkdtemp(prefix="jaxcal-bench-device-")
    os.environ["JAXCAL_COMPILATION_CACHE"] = cache
    try:
        import jax

        device = jax.devices()[0]
        kind = device.device_kind
        on_cpu = device.platform == "cpu"
        sizes = (QUICK if args.quick else Sizes()).scaled(args.scale)
        copy_bytes = 2**26 if on_cpu else 2**30
        measured = copy_bandwidth(copy_bytes)
        table_peak, label = (None, None) if on_cpu else peak_from_table(kind)
        peak = table_peak if table_peak is not None else measured
        source = (
            f"data sheet ({label})"
            if table_peak is not None
            else f"measured copy (jitted x + 1 over {copy_bytes / 2**20:.0f} MiB float32)"
        )
        _log(
            f"{device.platform} / {kind}; measured copy {fmt(measured / GB)} GB/s; peak "
            f"{fmt(peak / GB)} GB/s from {source}"
        )
        rows = []
        start = time.perf_counter()
        for name in names:
            _log(f"{name}: preparing")
            case = build(name, sizes)
            _log(f"{name}: {case.size}: timing")
            row = measure(case, args.repeats, args.budget)
            row["gb_per_s"] = row["bytes"] / row["warm_s"] / GB
            row["percent_of_peak"] = 100 * row["bytes"] / row["warm_s"] / peak
            rows.append(row)
            _log(
                f"{name}: first {row['first_s']:.3f} s, warm {row['warm_s']:.3f} s "
                f"({row['warm_calls']} calls), {row['gb_per_s']:.2f} GB/s "
                f"[{time.perf_counter() - start:.0f} s so far]"
            )
        report = {
            "device": kind,
            "platform": device.platform,
            "jax": jax.__version__,
            "python": platform.python_version(),
            "quick": args.quick,
            "scale": args.scale,
            "peak_bytes_per_s": peak,
            "peak_source": source,
            "measured_copy_bytes_per_s": measured,
            "rows": rows,
        }
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    print(markdown(report))
    print(f"\nPeak {fmt(peak / GB)} GB/s: {source}; measured copy {fmt(measured / GB)} GB/s.")
    print("GB moved per warm call, a lower bound:")
    for row in rows:
        print(f"* {row['workload']}: {row['bytes_counted']}.")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return report


if __name__ == "__main__":
    main()
