"""Hiranandani, Somani, Koyejo & Acharyya (WSDM 2019): clustered monotone transforms for
rating factorisation (CMTRF), the poster's Table 2 and the learned transforms.

Protocol. Each data set is split into train / validation / test ratings: the simulated sets
(``sd1``, ``sd2``: :func:`jaxcal.data.simulate_ratings`, our own designs, since the poster
does not publish its generator) and MovieLens-100K (``ml100k``: all 943 users, split
uniformly at random, the poster's "ML100k_u"; a chronological split of all users leaves 88%
of the test ratings to users without training ratings, and the poster's chronological set
keeps 751 users by a rule it does not give) by :func:`jaxcal.data.split_ratings`; Coat
(``coat``) keeps its own test set (ratings of randomly chosen items) and takes the
validation ratings from its training ratings. Every model is trained on the training ratings
over the same ``(l2_user, l2_item)`` grid; the grid point and the number of ALS sweeps are
chosen on the validation ratings, never on the test ratings (the authors' code chooses both
on the test loss). The models are the poster's: ridge MF (with and without biases), monotone
matrix completion (MMC), and CMTRF with one transform for all users (1-C), one per user
(N-C) and one per cluster of users (K-C), all with squared loss and anchored transforms; N-C
also in the authors' unanchored formulation (``N-C (unanchored)``, whose transforms collapse
to the margin); on request (``--models``) K-C with the generalised I-divergence (``K-C
I-div``). On Coat, whose training ratings are self-selected and come with the authors'
observation propensities, every CMTRF model is also fitted with inverse propensity scoring
(``CMTRF.fit(..., propensity=)``, rows ``(IPS)``: training losses and the validation MSE
weighted by ``1 / p``). Reported: test MSE (the poster's metric), MAE and the mean per-user
Kendall tau-b, with the poster's published MSEs beside ours for the synthetic sets.

The study's integer ``seed`` (``--seed``) becomes the JAX key ``jax.random.key(seed)`` of the
data simulation, the split and the fits (:func:`load_split`, :func:`run_study`).

Run with ``jaxcal reproduce hiranandani2019 --dataset sd2 --out results/hiranandani2019``.
Writes ``<dataset>/table.md`` (+ ``.csv``), ``<dataset>/results.json`` and
``<dataset>/transforms.png`` (the learned K-C transforms against the truth, when known) and
``<dataset>/predictions.npz`` (the test ratings and every model's predictions).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np

from jaxcal._progress import log
from jaxcal.data import (
    Interactions,
    load_coat,
    load_movielens,
    simulate_ratings,
    split_ratings,
)
from jaxcal.metrics import kendall_tau_per_user, rating_mae, rating_mse
from jaxcal.plot.ratings import normalised_transforms, rating_transforms
from jaxcal.recsys import CMTRF, MMC, Search
from jaxcal.reproduce._tables import write_table

__all__ = [
    "DATASETS",
    "DEFAULT_MODELS",
    "PUBLISHED",
    "Split",
    "add_arguments",
    "level_means",
    "load_split",
    "models",
    "run",
    "run_study",
    "search",
]

DATASETS = ("sd1", "sd2", "coat", "ml100k")
#: the models run by default (``--models`` picks others: "K-C I-div", whose Newton half-steps
#: make its grid about ten times slower on a CPU)
DEFAULT_MODELS = ("MF", "MF + biases", "MMC", "1-C", "N-C", "K-C", "N-C (unanchored)")
#: the poster's Table 2 (test MSE on its synthetic sets SD-1 and SD-2)
PUBLISHED: dict[str, dict[str, float]] = {
    "sd1": {"MF": 0.140, "LMaFit": 0.306, "MMC": 0.139, "NNMF": 0.137, "1-C": 0.122,
            "N-C": 0.122, "K-C": 0.123},
    "sd2": {"MF": 0.804, "LMaFit": 0.674, "MMC": 1.995, "NNMF": 1.893, "1-C": 0.326,
            "N-C": 0.347, "K-C": 0.326},
}  # fmt: skip
#: the simulated sets: 300 users x 400 items, rank 5, half the pairs rated (60,000 ratings;
#: at a tenth of that density no model learns the transforms, see the reproduction page)
SIMULATION = {"n_users": 300, "n_items": 400, "rank": 5, "density": 0.5, "noise": 0.1}
#: the default (l2_user, l2_item) grid: 9 values each, 81 points
DEFAULT_GRID = tuple(float(v) for v in np.logspace(-2, 2, 9))


class Split(NamedTuple):
    """A data set's train / validation / test ratings, and the truth when it is known."""

    train: Interactions
    validation: Interactions
    test: Interactions
    segment: np.ndarray | None  # [n_users] true segment of each user (simulated sets)
    truth: np.ndarray | None  # [n_segments, L] true mean latent score per rating level
    propensity: np.ndarray | None = None  # [n_users, n_items] P(rated) of the train ratings


def level_means(scores: np.ndarray, ratings: Interactions, segment: np.ndarray) -> np.ndarray:
    """``[n_segments, L]``: the mean true latent score of the ratings at each level, per
    segment of users -- what a learned transform estimates up to an affine map (the squared
    loss puts ``z[r]`` at the mean fitted score of level ``r``). Levels without ratings give
    NaN."""
    s = np.asarray(scores)[ratings.user, ratings.item]
    levels = int(ratings.rating.max())
    n_seg = int(np.max(segment)) + 1
    cell = np.asarray(segment)[ratings.user] * levels + (ratings.rating - 1)
    count = np.bincount(cell, minlength=n_seg * levels)
    total = np.bincount(cell, weights=s, minlength=n_seg * levels)
    with np.errstate(invalid="ignore"):
        return (total / np.where(count > 0, count, np.nan)).reshape(n_seg, levels)


def load_split(
    name: str, *, seed: int = 0, data_dir: Path | None = None, simulation: dict | None = None
) -> Split:
    """The train / validation / test split of data set ``name`` (see the module docstring);
    ``simulation`` overrides :data:`SIMULATION` for the simulated sets; ``seed`` gives the
    key ``jax.random.key(seed)`` of both the simulation and the split (the data of the
    published tables).

    Raises:
        ValueError: an unknown data set name.

    Example:
        >>> from jaxcal.reproduce.hiranandani2019 import load_split
        >>> split = load_split("sd1", simulation={"n_users": 40, "n_items": 30})
        >>> split.train.n_users, split.truth.shape  # sd1: one segment, one true transform
        (40, (1, 5))
    """
    key = jax.random.key(seed)
    if name in ("sd1", "sd2"):
        sim = simulate_ratings(name, **{**SIMULATION, **(simulation or {})}, key=key)
        train, validation, test = split_ratings(sim.ratings, validation=0.1, test=0.2, key=key)
        truth = level_means(sim.scores, sim.ratings, sim.segment)
        return Split(train, validation, test, np.asarray(sim.segment), truth)
    if name == "coat":
        coat = load_coat(None if data_dir is None else data_dir / "coat")
        train, validation, _ = split_ratings(
            Interactions.from_dense(coat.train), validation=0.1, test=0.0, key=key
        )
        test = Interactions.from_dense(coat.test)
        return Split(train, validation, test, None, None, np.asarray(coat.propensities))
    if name == "ml100k":
        ml = load_movielens(None if data_dir is None else data_dir / "ml-100k")
        train, validation, test = split_ratings(ml.ratings, validation=0.1, test=0.2, key=key)
        return Split(train, validation, test, None, None)
    raise ValueError(f"unknown data set {name!r}; choose from {', '.join(DATASETS)}.")


def models(*, rank: int, n_clusters: int, max_iter: int) -> dict[str, Any]:
    """The compared models, by the poster's names (the CMTRF models are searched over the
    penalty grid of :func:`search`).

    Example:
        >>> from jaxcal.reproduce.hiranandani2019 import models
        >>> chosen = models(rank=5, n_clusters=3, max_iter=20)
        >>> chosen["K-C"].transform, chosen["K-C"].n_clusters, chosen["MMC"].rank
        ('clustered', 3, 5)
    """
    common = dict(rank=rank, max_iter=max_iter)
    return {
        "MF": CMTRF(transform="none", **common),
        "MF + biases": CMTRF(transform="none", biases=True, **common),
        "MMC": MMC(rank=rank),
        "1-C": CMTRF(transform="global", **common),
        "N-C": CMTRF(transform="per_user", **common),
        "K-C": CMTRF(transform="clustered", n_clusters=n_clusters, **common),
        "N-C (unanchored)": CMTRF(transform="per_user", anchor=False, **common),
        "K-C I-div": CMTRF(
            transform="clustered", n_clusters=n_clusters, objective="poisson", **common
        ),
    }


def search(grid: tuple[float, ...]) -> Search:
    """The search of every CMTRF model: ``grid`` for both penalties, one random start each.

    Example:
        >>> from jaxcal.reproduce.hiranandani2019 import search
        >>> search((0.1, 1.0)).l2_user
        (0.1, 1.0)
    """
    return Search(l2_user=grid, l2_item=grid)


def _match_clusters(group: np.ndarray, segment: np.ndarray, n_groups: int) -> np.ndarray:
    """For each true segment, the learned cluster holding most of its users."""
    n_seg = int(segment.max()) + 1
    counts = np.zeros((n_seg, n_groups), int)
    np.add.at(counts, (segment, group), 1)
    return counts.argmax(axis=1)


def run_study(
    split: Split,
    *,
    rank: int = 10,
    grid: tuple[float, ...] = DEFAULT_GRID,
    n_clusters: int = 3,
    max_iter: int = 50,
    seed: int = 0,
    only: tuple[str, ...] | None = None,
    quiet: bool = False,
) -> dict[str, Any]:
    """Fit every model on ``split`` and measure it on the test ratings (every fit with the
    key ``jax.random.key(seed)``; the CMTRF models over ``grid`` x ``grid`` penalties, at
    most ``max_iter`` ALS sweeps).

    Returns:
        ``{"rows": {model: {mse, mae, kendall_tau, l2_user, l2_item, seconds}}, "fitted":
        {model: fitted model}, "predictions": {model: test predictions}}``.

    Example:
        >>> from jaxcal.reproduce.hiranandani2019 import load_split, run_study
        >>> split = load_split("sd1", simulation={"n_users": 40, "n_items": 30})
        >>> study = run_study(split, rank=2, grid=(1.0,), max_iter=3, only=("MF",), quiet=True)
        >>> sorted(study["rows"]["MF"])
        ['kendall_tau', 'l2_item', 'l2_user', 'mae', 'mse', 'seconds']
    """
    test = split.test
    rows: dict[str, dict[str, float]] = {}
    fitted: dict[str, Any] = {}
    predictions: dict[str, np.ndarray] = {}
    key = jax.random.key(seed)

    def measure(name: str, model: Any, **fit_args: Any) -> None:
        if isinstance(model, CMTRF):
            fit_args["search"] = search(grid)
        start = time.perf_counter()
        fit = model.fit(split.train, key=key, validation=split.validation, **fit_args)
        pred = jax.block_until_ready(fit.predict(test.user, test.item))
        seconds = time.perf_counter() - start
        tau, _ = kendall_tau_per_user(test.user, test.rating, pred)
        predictions[name] = np.asarray(pred)
        rows[name] = {
            "mse": float(rating_mse(test.rating, pred)),
            "mae": float(rating_mae(test.rating, pred)),
            "kendall_tau": float(tau),
            "l2_user": float(getattr(fit, "l2_user", np.nan)),
            "l2_item": float(getattr(fit, "l2_item", np.nan)),
            "seconds": seconds,
        }
        fitted[name] = fit
        log(
            f"{name}: test MSE {rows[name]['mse']:.4f}, MAE {rows[name]['mae']:.4f}, "
            f"Kendall tau-b {rows[name]['kendall_tau']:.4f} [{seconds:.1f}s]",
            quiet=quiet,
        )

    chosen = models(rank=rank, n_clusters=n_clusters, max_iter=max_iter)
    for name, model in chosen.items():
        if only is None or name in only:
            measure(name, model)
    if split.propensity is not None:  # inverse propensity scoring, CMTRF models only
        for name, model in chosen.items():
            if (only is None or name in only) and isinstance(model, CMTRF):
                measure(f"{name} (IPS)", model, propensity=split.propensity)
    return {"rows": rows, "fitted": fitted, "predictions": predictions}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """CLI options of ``jaxcal reproduce hiranandani2019``."""
    parser.add_argument("--dataset", choices=DATASETS, default="sd2")
    parser.add_argument("--out", type=Path, default=Path("results/hiranandani2019"))
    parser.add_argument("--data-dir", type=Path, default=None, help="default: the data directory")
    parser.add_argument("--rank", type=int, default=10)
    parser.add_argument("--clusters", type=int, default=3, help="clusters of K-C")
    parser.add_argument("--sweeps", type=int, default=50, help="most ALS sweeps per fit")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--models",
        default=None,
        help=f"comma-separated models (default: {', '.join(DEFAULT_MODELS)}; also: K-C I-div)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a 3 x 3 grid, 10 sweeps, simulated sets of 120 x 150 (smoke test)",
    )
    parser.add_argument("--quiet", action="store_true")


def run(args: argparse.Namespace) -> int:
    """Run the study on ``args.dataset``; write the table, results.json and the figure."""
    out = Path(args.out) / args.dataset
    grid = DEFAULT_GRID[::4] if args.quick else DEFAULT_GRID
    sweeps = min(args.sweeps, 10) if args.quick else args.sweeps
    names = tuple(models(rank=1, n_clusters=1, max_iter=1))
    only = (
        DEFAULT_MODELS if args.models is None else tuple(m.strip() for m in args.models.split(","))
    )
    unknown = sorted(set(only or ()) - set(names))
    if unknown:
        raise ValueError(f"unknown models {unknown}; choose from {list(names)}.")
    small = {"n_users": 120, "n_items": 150} if args.quick else None
    split = load_split(args.dataset, seed=args.seed, data_dir=args.data_dir, simulation=small)
    sizes = [int(x.rating.size) for x in split[:3]]
    log(f"{args.dataset}: train / validation / test ratings = {sizes}", quiet=args.quiet)
    study = run_study(
        split,
        rank=args.rank,
        grid=grid,
        n_clusters=args.clusters,
        max_iter=sweeps,
        seed=args.seed,
        only=only,
        quiet=args.quiet,
    )
    rows, fitted = study["rows"], study["fitted"]
    published = PUBLISHED.get(args.dataset, {})
    header = ["model", "test MSE", "MAE", "Kendall tau-b", "l2_user", "l2_item", "seconds"]
    if published:
        header.insert(2, "poster MSE")
    table = []
    for name, r in rows.items():
        row = [name, r["mse"], r["mae"], r["kendall_tau"], r["l2_user"], r["l2_item"],
               r["seconds"]]  # fmt: skip
        if published:
            row.insert(2, published.get(name))  # the poster has no biased MF, no I-div
        table.append(row)
    caption = (
        f"{args.dataset}: train / validation / test ratings {sizes}; rank {args.rank}; "
        f"grid {len(grid)} x {len(grid)}; lambda and sweeps chosen on validation."
    )
    write_table(out / "table", header, table, caption=caption)
    report = {"dataset": args.dataset, "sizes": sizes, "rank": args.rank, "grid": list(grid),
              "rows": rows, "published": published}  # fmt: skip
    k_c = fitted.get("K-C")
    if k_c is not None:
        z = np.asarray(k_c.transforms)[0]  # its only member
        truth = split.truth
        if truth is not None and split.segment is not None:
            order = _match_clusters(np.asarray(k_c.group)[0], split.segment, z.shape[0])
            report["truth"] = truth.tolist()
            z = z[order]
            gap = np.abs(normalised_transforms(z) - normalised_transforms(truth)).max(axis=1)
            report["transform_error"] = gap.tolist()  # per segment, on the normalised scale
            log(f"K-C transforms vs truth (max abs, normalised): {np.round(gap, 4).tolist()}",
                quiet=args.quiet)  # fmt: skip
            labels = [f"cluster for segment {s}" for s in range(truth.shape[0])]
            rating_transforms(
                z, out / "transforms.png", truth=truth, labels=labels,
                truth_labels=[f"segment {s} (truth)" for s in range(truth.shape[0])],
                title=f"K-C transforms, {args.dataset}",
            )  # fmt: skip
        else:
            rating_transforms(z, out / "transforms.png", title=f"K-C transforms, {args.dataset}")
        report["transforms"] = np.asarray(k_c.transforms)[0].tolist()
    (out / "results.json").write_text(json.dumps(report, indent=1))
    test = split.test
    np.savez(
        out / "predictions.npz", user=test.user, item=test.item, rating=test.rating,
        **{name: p for name, p in study["predictions"].items()},
    )  # fmt: skip
    print((out / "table.md").read_text())
    return 0
