r"""CMTRF: jaxcal's vmapped lambda grid vs the authors' C++ reference, variant by variant.

For one data set this script trains the four CMTRF variants -- ridge MF (no transform),
1-sigma (one global transform), N-sigma (one per user) and k-sigma (clustered) -- over the
same rank and the same ``(lambda_user, lambda_item)`` grid (9 x 9 = 81 points by default) in

* the authors' C++ (Hiranandani, Somani, Koyejo, Acharyya, WSDM 2019; github
  ``RaghavSomani/CMTRF``, Eigen, float64, one core): each variant's program runs its whole
  grid sequentially, as a user scripts it (k-sigma: one run per grid point, see below). Its
  own protocol picks lambda and stops the ALS sweeps on the *test* loss, so its number is
  the best test MSE over the grid (optimistic by construction);
* jaxcal: ``jaxcal.recsys.CMTRF(transform=..., rank=..., l2_user=grid, l2_item=grid)`` trains
  the whole grid in one vmapped program and picks lambda on a validation split of the
  *training* ratings; the table shows the test MSE of that model, and of the same grid in the
authors' formulation (``anchor=False, offset=False``: "unanchored"; for ridge MF, no
offset). A "MF + biases" row adds jaxcal's biased ridge MF (``biases=True``).
``--test-selected`` adds the unanchored model under the C++'s protocol (trained on train +
validation, lambda and the stopping sweep chosen on the test ratings; the lowest test MSE
over the grid and the sweeps), which compares the two models rather than the protocols.

Wall-clock seconds: the C++ time covers all 81 fits (reading the input included, each fit
scoring the test ratings), run one after the other; jaxcal's time covers the fit and the
predictions of the test ratings; its first call includes compilation (or a persistent-cache load),
the warm call is a second fit with the same shapes; both blocked with
``jax.block_until_ready``.

Data sets (``--dataset``): ``coat`` (``jaxcal.data.load_coat()``: the 290 x 300 explicit
ratings, train / test as shipped), ``sd1`` / ``sd2`` (``jaxcal.data.simulate_ratings`` with the
reproduction's settings: 300 x 400, rank 5, half the pairs rated, 60,000 ratings; split
70 / 10 / 20 by ``jaxcal.data.split_ratings``) and ``ml100k`` (``jaxcal.data.load_movielens``,
the same random split; needs the MovieLens-100K archive in the data directory). The C++
sees train + validation as its training set (it has no validation split), jaxcal trains on
train and selects on validation; both are scored on the same test ratings.

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
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_cmtrf.py \
        --build-reference /tmp/cmtrf-src --reference-dir /tmp/cmtrf-build --dataset coat
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_cmtrf.py \
        --reference-dir /tmp/cmtrf-build --dataset sd1 --rank 10

``--tol``, ``--patience``, ``--warm-start``, ``--refit`` and ``--ensemble`` pass ``tol``,
``patience``, ``warm_start=True``, ``refit=True`` (the chosen point trained again on train +
validation, the ratings the C++ trains on) and ``ensemble`` (the mean of that many fits of
the chosen point from different random starts) to jaxcal's ``CMTRF``.
``--skip-reference`` runs only the jaxcal side, ``--skip-jaxcal`` only the C++; ``--grid
0.1,0.2,0.5,1,2,5,10,20,50`` replaces the authors' grid (10..50, where small data sets pick
the smallest value); ``--mmc`` adds a row for ``jaxcal.recsys.MMC(rank=...)`` (one fit,
iterate chosen on validation). jaxcal's first call loads programs from its persistent
compilation cache when an earlier run stored them; ``JAXCAL_COMPILATION_CACHE=0`` times a
cold compile.
"""

from __future__ import annotations

import argparse
import dataclasses
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
#: the authors' ridge-MF grid (``MF.cpp``), used for both axes by default
DEFAULT_GRID = (10.0, 15.0, 20.0, 25.0, 30.0, 35.0, 40.0, 45.0, 50.0)
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
    ``sd2`` / ``ml100k``: a random 70 / 10 / 20 split."""
    from jaxcal.reproduce import hiranandani2019

    folder = None if data_dir is None else Path(data_dir)
    return hiranandani2019.load_split(name, seed=seed, data_dir=folder)


# ---------------------------------------------------------------------------------------
# the jaxcal side


class JaxcalResult(NamedTuple):
    test_mse: float
    first_seconds: float
    warm_seconds: float
    l2_user: float
    l2_item: float


def run_jaxcal(model, split, *, seed: int) -> JaxcalResult:
    """Fit and predict the test ratings twice (first call, then warm), blocked until ready;
    test MSE of the fit."""
    import jax

    from jaxcal.metrics import rating_mse

    times, fitted, pred = [], None, None
    for _ in range(2):
        start = time.perf_counter()
        fitted = model.fit(split.train, key=jax.random.key(seed), validation=split.validation)
        pred = jax.block_until_ready(fitted.predict(split.test.user, split.test.item))
        times.append(time.perf_counter() - start)
    mse = float(rating_mse(split.test.rating, pred))
    l2 = [float(np.asarray(getattr(fitted, f, np.nan))) for f in ("l2_user", "l2_item")]
    return JaxcalResult(mse, times[0], times[1], *l2)


def test_selected(model, split, *, seed: int) -> float:
    """The C++'s protocol with jaxcal's model: trained on train + validation, penalties and
    stopping sweep chosen on the test ratings; the lowest test MSE over the grid and the
    sweeps."""
    import jax

    model = dataclasses.replace(model, refit=False, ensemble=1)
    train = split.train.concat(split.validation)
    fitted = model.fit(train, key=jax.random.key(seed), validation=split.test)
    return float(np.nanmin(np.asarray(fitted.grid_validation_mse)))


# ---------------------------------------------------------------------------------------
# the table


def _fmt(value: float, digits: int = 3) -> str:
    return "-" if value is None or not np.isfinite(value) else f"{value:.{digits}f}"


def table(rows: list[dict]) -> str:
    head = (
        "| variant | C++ test MSE (lambda on test) | jaxcal test MSE (lambda on validation) "
        "| jaxcal, unanchored | jaxcal, unanchored, lambda on test | C++ grid s | C++ s / run "
        "| jaxcal grid s (first / warm) | jaxcal unanchored grid s (first / warm) "
        "| speed-up (unanchored, warm) |"
    )
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        warm = r.get("free_warm")
        speed = r["cpp_seconds"] / warm if warm and r.get("cpp_seconds") else None
        lines.append(
            f"| {r['variant']} | {_fmt(r.get('cpp_mse'))} | {_fmt(r.get('jax_mse'))} "
            f"| {_fmt(r.get('jax_free_mse'))} | {_fmt(r.get('jax_test_selected'))} "
            f"| {_fmt(r.get('cpp_seconds'), 2)} | {_fmt(r.get('cpp_per_run'), 3)} "
            f"| {_fmt(r.get('first'), 2)} / {_fmt(r.get('warm'), 2)} "
            f"| {_fmt(r.get('free_first'), 2)} / {_fmt(r.get('free_warm'), 2)} "
            f"| {'-' if speed is None else f'{speed:.1f}x'} |"
        )
    return "\n".join(lines)


def _parse_grid(text: str | None) -> tuple[float, ...]:
    if not text:
        return DEFAULT_GRID
    values = tuple(float(v) for v in text.split(","))
    if not values or min(values) <= 0:
        raise ValueError(f"--grid needs positive comma-separated values; got {text!r}.")
    return values


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="coat", choices=("coat", "sd1", "sd2", "ml100k"))
    p.add_argument("--reference-dir", type=Path, help="the built C++ (see --build-reference)")
    p.add_argument("--build-reference", type=Path, metavar="SRC", help="clone to build from")
    p.add_argument("--rank", type=int, default=10)
    p.add_argument("--n-clusters", type=int, default=5, help="k-sigma clusters")
    p.add_argument("--grid", help="comma-separated lambdas for both axes (default: 10..50)")
    p.add_argument("--variants", default=",".join(VARIANTS), help="subset, comma-separated")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", help="folder with coat/ and ml-100k/ (default: jaxcal's)")
    p.add_argument("--skip-reference", action="store_true")
    p.add_argument("--skip-jaxcal", action="store_true")
    p.add_argument("--mmc", action="store_true", help="add jaxcal's MMC baseline row")
    p.add_argument(
        "--tol", type=float, default=0.0, help="jaxcal's early-stopping tolerance (CMTRF tol)"
    )
    p.add_argument("--warm-start", action="store_true", help="jaxcal's CMTRF(warm_start=True)")
    p.add_argument("--refit", action="store_true", help="jaxcal's CMTRF(refit=True)")
    p.add_argument("--patience", type=int, help="jaxcal's CMTRF(patience=...)")
    p.add_argument(
        "--ensemble", type=int, default=1, help="jaxcal's CMTRF(ensemble=...): fits averaged"
    )
    p.add_argument(
        "--test-selected",
        action="store_true",
        help="add jaxcal's authors' formulation selected on the test ratings, as the C++",
    )
    args = p.parse_args(argv)
    grid = _parse_grid(args.grid)
    variants = [v for v in args.variants.split(",") if v]
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        raise SystemExit(f"unknown variants {sorted(unknown)}; choose from {list(VARIANTS)}")
    if args.build_reference is not None:
        if args.reference_dir is None:
            raise SystemExit("--build-reference needs --reference-dir (where to build)")
        build_reference(args.build_reference, args.reference_dir)
    use_reference = not args.skip_reference and args.reference_dir is not None

    split = load_split(args.dataset, seed=args.seed, data_dir=args.data_dir)
    n_train = split.train.size + split.validation.size
    progress(
        f"{args.dataset}: {split.train.n_users} users x {split.train.n_items} items, "
        f"{split.train.size} train + {split.validation.size} validation + "
        f"{split.test.size} test ratings; rank {args.rank}; grid {len(grid)} x {len(grid)}"
    )
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        data_env = None
        if use_reference:
            data_env = write_reference_input(
                Path(tmp), split.train.concat(split.validation), split.test
            )
        for variant in variants:
            program, transform = VARIANTS[variant]
            row = {"variant": variant}
            if use_reference:
                progress(f"C++ {program}: {len(grid) ** 2} fits")
                ref = run_reference(
                    args.reference_dir,
                    program,
                    data_env,
                    rank=args.rank,
                    grid=grid,
                    n_clusters=args.n_clusters,
                )
                i, j = np.unravel_index(np.argmin(ref.test_mse), ref.test_mse.shape)
                row.update(
                    cpp_mse=float(ref.test_mse[i, j]),
                    cpp_seconds=ref.seconds,
                    cpp_per_run=ref.seconds / ref.test_mse.size,
                )
                progress(
                    f"C++ {program}: {ref.seconds:.2f} s, best test MSE {row['cpp_mse']:.4f} "
                    f"at l_user={grid[i]}, l_item={grid[j]} ({n_train} training ratings)"
                )
            if not args.skip_jaxcal:
                from jaxcal.recsys import CMTRF

                progress(f"jaxcal CMTRF(transform={transform!r}): {len(grid) ** 2} grid points")
                model = CMTRF(
                    transform=transform,
                    rank=args.rank,
                    n_clusters=args.n_clusters,
                    l2_user=grid,
                    l2_item=grid,
                    tol=args.tol,
                    warm_start=args.warm_start,
                    refit=args.refit,
                    patience=args.patience,
                    ensemble=args.ensemble,
                )
                res = run_jaxcal(model, split, seed=args.seed)
                row.update(jax_mse=res.test_mse, first=res.first_seconds, warm=res.warm_seconds)
                # the authors' formulation: no offset (and, with a transform, no anchors)
                free = dataclasses.replace(model, anchor=False, offset=False)
                res_free = run_jaxcal(free, split, seed=args.seed)
                row.update(
                    jax_free_mse=res_free.test_mse,
                    free_first=res_free.first_seconds,
                    free_warm=res_free.warm_seconds,
                )
                if args.test_selected:
                    row["jax_test_selected"] = test_selected(free, split, seed=args.seed)
                progress(
                    f"jaxcal {transform}: first {res.first_seconds:.2f} s, warm "
                    f"{res.warm_seconds:.2f} s, test MSE {res.test_mse:.4f} at "
                    f"l2_user={res.l2_user}, l2_item={res.l2_item}"
                )
            rows.append(row)
            if transform == "none" and not args.skip_jaxcal:  # the biased ridge-MF baseline
                biased = dataclasses.replace(model, biases=True)
                res = run_jaxcal(biased, split, seed=args.seed)
                progress(f"jaxcal biased MF: {res.warm_seconds:.2f} s, test {res.test_mse:.4f}")
                rows.append(
                    {
                        "variant": "MF + biases",
                        "jax_mse": res.test_mse,
                        "first": res.first_seconds,
                        "warm": res.warm_seconds,
                    }
                )
    if args.mmc and not args.skip_jaxcal:
        from jaxcal.recsys import MMC

        progress(f"jaxcal MMC(rank={args.rank})")
        res = run_jaxcal(MMC(rank=args.rank), split, seed=args.seed)
        rows.append(
            {
                "variant": "MMC",
                "jax_mse": res.test_mse,
                "first": res.first_seconds,
                "warm": res.warm_seconds,
            }
        )
    print(
        f"\n### {args.dataset} (rank {args.rank}, {len(grid)} x {len(grid)} lambda grid, "
        f"jaxcal tol={args.tol:g}, patience={args.patience}, warm_start={args.warm_start}, "
        f"refit={args.refit}, ensemble={args.ensemble})\n"
    )
    print(table(rows))


if __name__ == "__main__":
    main()
