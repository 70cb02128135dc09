r"""CMTRF: jaxcal against the authors' C++ reference, variant by variant, under one protocol.

For each data set, variant (ridge MF: no transform; 1-sigma: one global transform; N-sigma:
one per user; k-sigma: 5 clusters), split and row, this script trains rank-10 models over
the same 9 x 9 ``(lambda_user, lambda_item)`` grid (default ``0.1 0.2 0.5 1 2 5 10 20 50``
on both axes) and records the test MSE and the wall-clock seconds. The protocol, fixed
before any run:

Rows, in this order (``--rows``):

* ``default``: ``CMTRF(transform=..., rank=10, n_clusters=5)`` with every other setting at
  its default, ``fit(train, key=..., validation=..., search=Search(l2_user=grid,
  l2_item=grid))``: a single model, lambda chosen on the validation ratings;
* ``authors``: the same in the authors' formulation, ``anchor=False, offset=False`` (for
  ridge MF: no offset), single model, defaults otherwise;
* ``tuned``: the authors' formulation with ``tol=0.003`` and ``Search(warm_start=True,
  refit=True)`` (each ``l2_user``'s points trained one after another from the previous
  one's factors; the chosen point trained again on train + validation), single model;
* ``ensemble``: ``tuned`` with ``Search(ensemble=10)``: the mean of 10 fits of the chosen
  point (labelled "ensemble of 10");
* the C++ (``cpp``): the authors' programs (Hiranandani, Somani, Koyejo, Acharyya, WSDM 2019;
  github ``RaghavSomani/CMTRF``; Eigen, float64) over the same grid, each program as a user
  scripts it (k-sigma: one run per grid point, see below). Their protocol chooses lambda
  and stops the ALS sweeps on the *test* loss; the row is the best test MSE over the grid
  (lambda and stopping chosen on the test ratings, optimistic by construction).

The C++ trains on train + validation (it has no validation split); jaxcal trains on train
and chooses on validation; both are scored on the same test ratings.

Splits (``--seeds``): seed ``s`` is ``jaxcal.reproduce.hiranandani2019.load_split(data,
seed=s)`` and the fit key ``jax.random.key(s)``. ``sd1`` / ``sd2``
(``jaxcal.data.simulate_ratings``: 300 x 400, rank 5, 60,000 ratings; split 70 / 10 / 20):
each seed is a new simulated data set and split, and the C++ runs on each. ``coat`` (the
290 x 300 ratings, train / test as shipped): each seed draws another 10% validation
hold-out of the training ratings and another initialisation; the C++ sees the same data
whatever the seed and is deterministic (fixed-seed initialisation), so it runs once.

Cores and timing: the command runs under ``taskset -c <core>``, so that the script, the C++
programs and the jaxcal workers share one core; each jaxcal measurement is a fresh worker
process (``--worker``) with ``XLA_FLAGS="--xla_cpu_multi_thread_eigen=false
intra_op_parallelism_threads=1"`` and ``JAXCAL_COMPILATION_CACHE`` set to a new empty
folder. It fits and predicts the test ratings twice, blocked with
``jax.block_until_ready``: the first call (compilation included, data loading excluded)
and the warm call (the same fit again). The C++ time covers its whole grid (reading the
input included, each fit scoring the test ratings). For each variant and seed the C++ runs
first, then the jaxcal rows, so that a speed ratio (C++ seconds / jaxcal seconds of the
same seed; Coat: of its one C++ run) compares runs made minutes apart on the same core.
Loops: data set, then variant, then seed, then row.

Output: one line per finished fit on stderr, every record appended to ``--out`` (JSON, a
list, rewritten after each fit) and, at the end (or with ``--table FILE ...`` from saved
files), the table: test MSE mean (min-max) over seeds, first / warm seconds, speed ratios,
and the win / tie / loss count of a row against the C++ per (data, variant): a tie when the
C++'s test MSE (for sd1 / sd2 its mean over the same seeds) lies within the row's min-max
over seeds, a win when it lies above it, a loss when below. For sd1 / sd2 the table adds
the paired comparison (the same data set and split per seed): on how many seeds the row
tests below the C++, and the difference of test MSEs.

The reference build (``--build-reference SRC``, SRC a clone of the authors' repository;
their code has no licence, so nothing of it is part of jaxcal) copies ``SRC/src`` into
``--reference-dir`` and edits the copy as follows before compiling it:

1. in ``MF.cpp``, ``1_sigma.cpp``, ``N_sigma.cpp``, ``k_sigma.cpp``: the data set 0 branch
   (``file.open("../datasets/u100k_mapped.data"); n = 751; p = 1616; split = 80000;``) reads
   the file name, the number of users and items and the number of training lines from the
   environment variables ``CMTRF_DATA``, ``CMTRF_N_USERS``, ``CMTRF_N_ITEMS``,
   ``CMTRF_N_TRAIN`` (the file lists ``user item rating`` lines, 0-based ids, training lines
   first, then the test lines);
2. each uncommented grid line ``vector<double> L1 = {...};`` (and ``L2``, ``L3``, ``L4``)
   becomes ``vector<double> L1 = env_grid("CMTRF_L1");`` with a small helper that parses a
   space-separated list, defined before ``int main()``;
3. the closing ``paplay`` sound command becomes ``true``.

Nothing else changes: the tolerance of data set 0 (``tol = 1``), epsilon 0.5, the
deterministic initialisation (``default_random_engine`` with its default seed, mean 3), the
stopping rules on the test loss and the per-grid-point output folders stay. The programs
are compiled with ``g++ -std=c++11 -O3 -march=native`` plus the flags of the authors'
``run.sh`` (``-fno-math-errno -funsafe-math-optimizations -fno-rounding-math
-fcx-limited-range -fno-signaling-nans``). ``k_sigma.cpp`` first runs N-sigma over its grid
``L1 x L2`` and then the clustered phase over ``L3 x L4`` from the last N-sigma state, so the
script runs it once per grid point with ``L1 = L3 = {l_user}`` and ``L2 = L4 = {l_item}``.
Its reported test loss (and N-sigma's) leaves out users whose training ratings are all
equal but still divides by the full test size.

Usage::

    git clone https://github.com/RaghavSomani/CMTRF /tmp/cmtrf-src
    B="env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE taskset -c 0 python benchmarks/bench_cmtrf.py"
    $B --build-reference /tmp/cmtrf-src --reference-dir /tmp/cmtrf-build --build-only
    $B --reference-dir /tmp/cmtrf-build --dataset coat --seeds 0,1,2,3,4 --out coat.json
    $B --table coat.json sd1.json

``--skip-reference`` leaves out the C++, ``--rows`` and ``--variants`` pick subsets.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

#: the C++ programs of each variant, and the jaxcal ``transform`` it corresponds to
VARIANTS = {
    "MF": ("MF", "none"),
    "1-sigma": ("1_sigma", "global"),
    "N-sigma": ("N_sigma", "per_user"),
    "k-sigma": ("k_sigma", "clustered"),
}
#: the lambda grid of both axes
DEFAULT_GRID = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0)
ROWS = ("default", "authors", "tuned", "ensemble")
ROW_LABELS = {
    "default": "jaxcal defaults, single model",
    "authors": "jaxcal authors' formulation, single model",
    "tuned": "jaxcal authors' formulation, tuned (tol 0.003, warm start, refit), single model",
    "ensemble": "jaxcal authors' formulation, tuned, ensemble of 10",
    "cpp": "C++ (lambda and stopping chosen on test)",
}
RANK, N_CLUSTERS = 10, 5
WORKER_XLA_FLAGS = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"

CXXFLAGS = (
    "-std=c++11 -O3 -march=native -Ieigen -w -fno-math-errno -funsafe-math-optimizations "
    "-fno-rounding-math -fcx-limited-range -fno-signaling-nans"
).split()

_ENV_GRID = r"""
#include <cstdlib>
static std::vector<double> env_grid(const char* name)
{
    std::vector<double> out;
    std::stringstream in(std::getenv(name));
    double x;
    while (in >> x)
        out.push_back(x);
    return out;
}
"""
_DATA_BRANCH = re.compile(
    r'file\.open\("\.\./datasets/u100k_mapped\.data"\);\s*n = 751;\s*p = 1616;\s*split = 80000;'
)
_DATA_FROM_ENV = (
    'file.open(getenv("CMTRF_DATA")); n = atoi(getenv("CMTRF_N_USERS")); '
    'p = atoi(getenv("CMTRF_N_ITEMS")); split = atoi(getenv("CMTRF_N_TRAIN"));'
)
_GRID_LINE = re.compile(r"^(\s*)vector<double> (L[1-4]) = \{[^}]*\};", re.MULTILINE)


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------
# the reference build and runs


def patch_reference(text: str) -> str:
    """Apply edits 1-3 of the module docstring to one of the authors' programs."""
    text = text.replace("\r\n", "\n")
    text, n_data = _DATA_BRANCH.subn(_DATA_FROM_ENV, text, count=1)
    text, n_grid = _GRID_LINE.subn(r'\1vector<double> \2 = env_grid("CMTRF_\2");', text)
    if n_data != 1 or n_grid < 2:
        raise ValueError("the reference source does not have the expected layout")
    text = text.replace("int main()", _ENV_GRID + "\nint main()", 1)
    return text.replace('"paplay /usr/share/sounds/freedesktop/stereo/complete.oga"', '"true"')


def build_reference(source: Path, build: Path) -> None:
    """Copy ``source/src`` to ``build``, patch the four programs, compile them."""
    if not (source / "src" / "sigma.cpp").is_file():
        raise ValueError(f"{source} is not a clone of RaghavSomani/CMTRF (no src/sigma.cpp)")
    if build.exists():
        shutil.rmtree(build)
    shutil.copytree(source / "src", build)
    for program, _ in VARIANTS.values():
        path = build / f"{program}.cpp"
        path.write_text(patch_reference(path.read_text()))
        progress(f"compiling {program}.cpp")
        subprocess.run(["g++", *CXXFLAGS, path.name, "-o", program], cwd=build, check=True)


def _grid_text(values) -> str:
    return " ".join(repr(float(v)) for v in values)


def _last_loss_table(stdout: str) -> np.ndarray:
    """The last ``LT`` matrix a program prints (test loss per grid point)."""
    lines = stdout.splitlines()
    start = max(i for i, line in enumerate(lines) if line.strip() == "LT") + 1
    rows = []
    for line in lines[start:]:
        try:
            rows.append([float(v) for v in line.split()])
        except ValueError:
            break
        if not rows[-1]:
            rows.pop()
            break
    return np.asarray(rows)


class ReferenceResult(NamedTuple):
    test_mse: np.ndarray  # [n_grid, n_grid] the program's test loss per grid point
    seconds: float  # wall clock for the whole grid


def write_reference_input(folder: Path, train, test) -> dict[str, str]:
    """The data file and the environment the patched programs read."""
    path = folder / "ratings.txt"
    rows = np.concatenate(
        [np.stack([x.user, x.item, x.rating], axis=1) for x in (train, test)], axis=0
    )
    np.savetxt(path, rows.astype(np.int64), fmt="%d")
    return {
        "CMTRF_DATA": str(path),
        "CMTRF_N_USERS": str(train.n_users),
        "CMTRF_N_ITEMS": str(train.n_items),
        "CMTRF_N_TRAIN": str(train.size),
    }


def run_reference(
    build: Path, program: str, data_env: dict[str, str], *, rank: int, grid, n_clusters: int
) -> ReferenceResult:
    """Run one variant over ``grid x grid``; wall clock of all the fits."""
    binary = build.resolve() / program
    if not binary.is_file():
        raise ValueError(f"{binary} not found: build it with --build-reference")
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp) / "run"  # the programs write results under ../data/
        cwd.mkdir()
        shutil.copy(build / "params.txt", cwd / "params.txt")
        stdin = f"0\n{rank}\n" + (f"{n_clusters}\n" if program == "k_sigma" else "")
        if program == "k_sigma":  # one program run per grid point (see the docstring)
            points = [({"L1": [a], "L2": [b], "L3": [a], "L4": [b]}) for a in grid for b in grid]
        else:
            points = [{"L1": grid, "L2": grid}]
        losses = []
        start = time.perf_counter()
        for point in points:
            env = {**os.environ, **data_env}
            env.update({f"CMTRF_{k}": _grid_text(v) for k, v in point.items()})
            out = subprocess.run(
                [str(binary)], cwd=cwd, env=env, input=stdin, capture_output=True, text=True
            )
            if out.returncode != 0:
                raise RuntimeError(f"{program} failed ({out.returncode}): {out.stderr[-2000:]}")
            losses.append(_last_loss_table(out.stdout))
        seconds = time.perf_counter() - start
    table = np.concatenate([t.ravel() for t in losses]).reshape(len(grid), len(grid))
    return ReferenceResult(table, seconds)


# ---------------------------------------------------------------------------------------
# data sets


def load_split(name: str, *, seed: int, data_dir: str | None):
    """The reproduction's split (:func:`jaxcal.reproduce.hiranandani2019.load_split`):
    ``coat``: Coat's own train / test, 10% of train held out for validation; ``sd1`` /
    ``sd2``: a new simulated data set and a random 70 / 10 / 20 split per seed."""
    from jaxcal.reproduce import hiranandani2019

    folder = None if data_dir is None else Path(data_dir)
    return hiranandani2019.load_split(name, seed=seed, data_dir=folder)


# ---------------------------------------------------------------------------------------
# the jaxcal side: one measurement per worker process


def jaxcal_setup(variant: str, row: str, grid):
    """The estimator and the ``Search`` of a row (see the module docstring)."""
    from jaxcal.recsys import CMTRF, Search

    model = CMTRF(transform=VARIANTS[variant][1], rank=RANK, n_clusters=N_CLUSTERS)
    search = Search(l2_user=grid, l2_item=grid)
    if row != "default":
        model = dataclasses.replace(model, anchor=False, offset=False)
    if row in ("tuned", "ensemble"):
        model = dataclasses.replace(model, tol=0.003)
        search = dataclasses.replace(search, warm_start=True, refit=True)
    if row == "ensemble":
        search = dataclasses.replace(search, ensemble=10)
    return model, search


def worker(spec: dict) -> dict:
    """Fit and predict the test ratings twice (first call, then warm), blocked until
    ready; the test MSE of the fit."""
    import jax

    from jaxcal.metrics import rating_mse

    split = load_split(spec["data"], seed=spec["seed"], data_dir=spec.get("data_dir"))
    model, search = jaxcal_setup(spec["variant"], spec["row"], tuple(spec["grid"]))
    times, fitted, pred = [], None, None
    for _ in range(2):
        start = time.perf_counter()
        fitted = model.fit(
            split.train,
            key=jax.random.key(spec["seed"]),
            validation=split.validation,
            search=search,
        )
        pred = jax.block_until_ready(fitted.predict(split.test.user, split.test.item))
        times.append(time.perf_counter() - start)
    return {
        "test_mse": float(rating_mse(split.test.rating, pred)),
        "first_s": times[0],
        "warm_s": times[1],
        "l2_user": float(np.asarray(fitted.l2_user)),
        "l2_item": float(np.asarray(fitted.l2_item)),
    }


def run_worker(spec: dict) -> dict:
    """:func:`worker` in a fresh process with one XLA thread and an empty program cache."""
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "XLA_FLAGS": WORKER_XLA_FLAGS, "JAXCAL_COMPILATION_CACHE": cache}
        out = subprocess.run(
            [sys.executable, __file__, "--worker", json.dumps(spec)],
            env=env,
            capture_output=True,
            text=True,
        )
    if out.returncode != 0:
        raise RuntimeError(f"worker {spec} failed: {out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------
# the table


def _spread(values, digits: int) -> str:
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=float)
    if v.size == 0:
        return "-"
    if v.size == 1:
        return f"{v[0]:.{digits}f}"
    dash = " to " if v.min() < 0 else "-"
    return f"{v.mean():.{digits}f} ({v.min():.{digits}f}{dash}{v.max():.{digits}f})"


def _ratio(values) -> str:
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        return "-"
    if v.size == 1:
        return f"{v[0]:.1f}x"
    return f"{v.mean():.1f}x ({v.min():.1f}-{v.max():.1f})"


def table(records: list[dict]) -> str:
    """The markdown table and the win / tie / loss counts of the jaxcal rows against the
    C++ (see the module docstring)."""
    lines = [
        "| data | variant | row | seeds | test MSE mean (min-max) | first s | warm s "
        "| C++ s / warm s | C++ s / first s |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    counts: dict[str, list[str]] = {}
    paired: list[str] = []
    pairs = dict.fromkeys((r["data"], r["variant"]) for r in records)
    for data, variant in pairs:
        mine = [r for r in records if (r["data"], r["variant"]) == (data, variant)]
        cpp = {r["seed"]: r for r in mine if r["row"] == "cpp"}
        for row in (*ROWS, "cpp"):
            rs = [r for r in mine if r["row"] == row]
            if not rs:
                continue
            mse = [r["test_mse"] for r in rs]
            if row == "cpp":
                lines.append(
                    f"| {data} | {variant} | {ROW_LABELS[row]} | {len(rs)} | {_spread(mse, 4)} "
                    f"| - | {_spread([r['seconds'] for r in rs], 2)} | - | - |"
                )
                continue
            # the C++ of the same seed (Coat: its one run, the same whatever the seed)
            once = next(iter(cpp.values()), None)
            ref = [once if data == "coat" else cpp.get(r["seed"]) for r in rs]
            warm = [c["seconds"] / r["warm_s"] for r, c in zip(rs, ref, strict=True) if c]
            first = [c["seconds"] / r["first_s"] for r, c in zip(rs, ref, strict=True) if c]
            lines.append(
                f"| {data} | {variant} | {ROW_LABELS[row]} | {len(rs)} | {_spread(mse, 4)} "
                f"| {_spread([r['first_s'] for r in rs], 2)} "
                f"| {_spread([r['warm_s'] for r in rs], 2)} | {_ratio(warm)} | {_ratio(first)} |"
            )
            seeds = {r["seed"] for r in rs}
            c_mse = [c["test_mse"] for s, c in cpp.items() if data == "coat" or s in seeds]
            if c_mse:
                c = float(np.mean(c_mse))
                verdict = "win" if c > max(mse) else "loss" if c < min(mse) else "tie"
                counts.setdefault(row, []).append(f"{data} {variant}: {verdict}")
            diff = [r["test_mse"] - c["test_mse"] for r, c in zip(rs, ref, strict=True) if c]
            if data != "coat" and diff:  # sd1 / sd2: the same data set and split per seed
                paired.append(
                    f"{data} {variant} {row}: below the C++ on {sum(d < 0 for d in diff)} of "
                    f"{len(diff)} seeds, difference {_spread(diff, 4)}"
                )
    out = ["\n".join(lines), ""]
    for row, verdicts in counts.items():
        tally = {k: sum(v.endswith(k) for v in verdicts) for k in ("win", "tie", "loss")}
        out.append(
            f"{ROW_LABELS[row]} against the C++: {tally['win']} win / {tally['tie']} tie / "
            f"{tally['loss']} loss ({'; '.join(verdicts)})"
        )
    if paired:
        out += ["", "Paired per seed (jaxcal test MSE minus the C++'s):", *paired]
    return "\n".join(out)


# ---------------------------------------------------------------------------------------
# the driver


def _parse_grid(text: str | None) -> tuple[float, ...]:
    if not text:
        return DEFAULT_GRID
    values = tuple(float(v) for v in text.split(","))
    if not values or min(values) <= 0:
        raise ValueError(f"--grid needs positive comma-separated values; got {text!r}.")
    return values


def _save(path: Path | None, records: list[dict]) -> None:
    if path is not None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(records, indent=1))
        tmp.replace(path)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--table", nargs="+", type=Path, help="print the table of saved records")
    p.add_argument("--dataset", default="coat", choices=("coat", "sd1", "sd2"))
    p.add_argument("--reference-dir", type=Path, help="the built C++ (see --build-reference)")
    p.add_argument("--build-reference", type=Path, metavar="SRC", help="clone to build from")
    p.add_argument("--build-only", action="store_true", help="build the C++ and stop")
    p.add_argument("--grid", help="comma-separated lambdas for both axes")
    p.add_argument("--variants", default=",".join(VARIANTS), help="subset, comma-separated")
    p.add_argument("--rows", default="default,authors", help=f"subset of {','.join(ROWS)}")
    p.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated seeds")
    p.add_argument("--data-dir", help="folder with coat/ (default: jaxcal's)")
    p.add_argument("--skip-reference", action="store_true")
    p.add_argument("--out", type=Path, help="JSON file of the records (rewritten per fit)")
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return
    if args.table:
        print(table([r for f in args.table for r in json.loads(f.read_text())]))
        return
    grid = _parse_grid(args.grid)
    variants = [v for v in args.variants.split(",") if v]
    rows = [r for r in args.rows.split(",") if r]
    if set(variants) - set(VARIANTS) or set(rows) - set(ROWS):
        raise SystemExit(f"choose variants from {list(VARIANTS)} and rows from {list(ROWS)}")
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.build_reference is not None:
        if args.reference_dir is None:
            raise SystemExit("--build-reference needs --reference-dir (where to build)")
        build_reference(args.build_reference, args.reference_dir)
    if args.build_only:
        return
    use_reference = not args.skip_reference and args.reference_dir is not None
    cores = sorted(os.sched_getaffinity(0))
    progress(f"{args.dataset}: cores {cores}, seeds {seeds}, rows {rows}, grid {grid}")
    records: list[dict] = []
    for variant in variants:
        program = VARIANTS[variant][0]
        for seed in seeds:
            base = {"data": args.dataset, "variant": variant, "seed": seed, "cores": cores}
            if use_reference and (args.dataset != "coat" or seed == seeds[0]):
                split = load_split(args.dataset, seed=seed, data_dir=args.data_dir)
                with tempfile.TemporaryDirectory() as tmp:
                    data_env = write_reference_input(
                        Path(tmp), split.train.concat(split.validation), split.test
                    )
                    ref = run_reference(
                        args.reference_dir,
                        program,
                        data_env,
                        rank=RANK,
                        grid=grid,
                        n_clusters=N_CLUSTERS,
                    )
                i, j = np.unravel_index(np.argmin(ref.test_mse), ref.test_mse.shape)
                records.append(
                    {
                        **base,
                        "row": "cpp",
                        "test_mse": float(ref.test_mse[i, j]),
                        "seconds": ref.seconds,
                        "l2_user": grid[i],
                        "l2_item": grid[j],
                        "time": time.strftime("%H:%M:%S"),
                    }
                )
                _save(args.out, records)
                progress(
                    f"{args.dataset} {variant} seed {seed} C++: {ref.seconds:.2f} s, "
                    f"test MSE {records[-1]['test_mse']:.4f}"
                )
            for row in rows:
                spec = {**base, "row": row, "grid": list(grid), "data_dir": args.data_dir}
                res = run_worker(spec)
                records.append({**base, "row": row, **res, "time": time.strftime("%H:%M:%S")})
                _save(args.out, records)
                progress(
                    f"{args.dataset} {variant} seed {seed} {row}: first {res['first_s']:.2f} s, "
                    f"warm {res['warm_s']:.2f} s, test MSE {res['test_mse']:.4f} "
                    f"(l2 {res['l2_user']:g}, {res['l2_item']:g})"
                )
    print(table(records))


if __name__ == "__main__":
    main()
