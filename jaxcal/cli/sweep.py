"""``jaxcal sweep MODEL``: train K ranking models in one compiled program and rank them.

Examples::

    jaxcal sweep bpr --grid learning_rate=0.003,0.01,0.03 --grid l2=0.01,0.1 \\
        --grid replicate=0,1 --set rank=16 --set n_steps=1000 --set batch_size=256
    jaxcal sweep wrmf --grid rank=8,16,32 --grid alpha=1,10 --output wrmf.csv
    jaxcal sweep lightgcn --train train.tsv --test test.tsv --grid learning_rate=0.001,0.01

The data is Coat (``--dataset coat``, the default: MNAR ``train.ascii`` ratings >= 4 are
the positives, the MAR ``test.ascii`` ratings are evaluated) or two ``user item rating``
files (``--train`` / ``--test``, ratings binarised at ``--threshold``; the rated test pairs
are evaluated). Every configuration is scored by per-user AUC, NDCG@k and Recall@k on the
test set (``jaxcal.metrics.ranking``); the table is printed and optionally written as CSV.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import time
from typing import Any

import numpy as np

import jaxcal.recsys as recsys
from jaxcal._progress import log, progress
from jaxcal.cli._parsers import documented_parser
from jaxcal.data import binarize, load_coat, load_triples
from jaxcal.metrics.ranking import auc, ndcg_at_k, recall_at_k

__all__ = ["add_parser", "run", "MODELS"]

# CLI name -> class name in jaxcal.recsys
MODELS = {
    "bpr": "BPRMF",
    "ubpr": "UBPR",
    "ncf": "NCF",
    "cml": "CML",
    "lightgcn": "LightGCN",
    "wrmf": "WRMF",
}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``jaxcal sweep``."""
    parser = documented_parser(
        subparsers,
        "sweep",
        "train K ranking models (replicates / hyperparameters) in one compiled program",
        __doc__,
    )
    parser.add_argument("model", choices=sorted(MODELS), help="ranking model to train")
    parser.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="NAME=V1,V2,...",
        help="values to sweep (repeat for a Cartesian product); names: replicate (the index "
        "folded into the key), rank, learning_rate, l2, and model-specific ones (CML margin, "
        "WR-MF alpha)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a fixed hyperparameter of the model (e.g. rank=32, n_steps=2000, hidden=64,32)",
    )
    parser.add_argument("--dataset", choices=("coat",), default="coat")
    parser.add_argument("--data-dir", default=None, help="Coat folder (default: shared data)")
    parser.add_argument("--train", default=None, help="training 'user item rating' file")
    parser.add_argument("--test", default=None, help="test 'user item rating' file")
    parser.add_argument("--one-based", action="store_true", help="ids in the files start at 1")
    parser.add_argument("--threshold", type=float, default=4, help="rating >= this is positive")
    parser.add_argument("--k", type=int, default=5, help="cut-off of NDCG@k and Recall@k")
    parser.add_argument(
        "--key", type=int, default=0, help="seed of the base PRNG key jax.random.key(KEY)"
    )
    parser.add_argument("--devices", type=int, default=None, help="shard K over N devices")
    parser.add_argument("--output", default=None, help="write the table as CSV here")
    parser.add_argument("--save", default=None, help="save the SweepResult (.npz) here")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    parser.set_defaults(func=run)


def _number(text: str, name: str) -> int | float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{name}: {text!r} is not a number.") from None
    return int(value) if value.is_integer() and "." not in text and "e" not in text else value


def _split(item: str, flag: str) -> tuple[str, str]:
    name, sep, values = item.partition("=")
    if not sep or not name.strip() or not values.strip():
        raise ValueError(f"{flag} expects NAME=VALUE(S); got {item!r}.")
    return name.strip(), values.strip()


def parse_grid(items: list[str]) -> dict[str, list[int | float]]:
    """``["learning_rate=0.01,0.1", "replicate=0,1"]`` -> ``{"learning_rate": [0.01, 0.1],
    "replicate": [0, 1]}``.

    Example:
        >>> parse_grid(["learning_rate=0.01,0.1", "replicate=0,1"])
        {'learning_rate': [0.01, 0.1], 'replicate': [0, 1]}
    """
    grid: dict[str, list[int | float]] = {}
    for item in items:
        name, values = _split(item, "--grid")
        if name in grid:
            raise ValueError(f"--grid {name} given twice.")
        grid[name] = [_number(v, name) for v in values.split(",") if v.strip()]
    return grid


def parse_settings(model_cls: type, items: list[str]) -> dict[str, Any]:
    """``["rank=32", "hidden=64,32", "optimizer=sgd"]`` -> field values of ``model_cls``.

    Example:
        >>> from jaxcal.recsys import NCF
        >>> parse_settings(NCF, ["rank=32", "hidden=64,32", "optimizer=sgd"])
        {'rank': 32, 'hidden': (64, 32), 'optimizer': 'sgd'}
    """
    fields = {f.name: f for f in dataclasses.fields(model_cls)}
    out: dict[str, Any] = {}
    for item in items:
        name, value = _split(item, "--set")
        if name not in fields:
            raise ValueError(
                f"{model_cls.__name__} has no hyperparameter {name!r}; "
                f"choose from {sorted(fields)}."
            )
        default = fields[name].default
        if isinstance(default, str):
            out[name] = value
        elif isinstance(default, tuple):
            out[name] = tuple(int(_number(v, name)) for v in value.split(","))
        elif isinstance(default, int):
            number = _number(value, name)
            if not isinstance(number, int):
                raise ValueError(f"{name} must be an integer; got {value!r}.")
            out[name] = number
        else:
            out[name] = float(_number(value, name))
    return out


def _load_data(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(train 0/1 matrix, test 0/1 labels, test mask)``."""
    if (args.train is None) != (args.test is None):
        raise ValueError("give both --train and --test, or neither (then --dataset is used).")
    if args.train is not None:
        train = load_triples(args.train, one_based=args.one_based)
        test = load_triples(args.test, one_based=args.one_based)
        n_users = max(train.n_users, test.n_users)
        n_items = max(train.n_items, test.n_items)
        train_m = np.zeros((n_users, n_items))
        train_m[train.user, train.item] = train.rating
        test_m = np.zeros((n_users, n_items))
        test_m[test.user, test.item] = test.rating
        mask = np.zeros((n_users, n_items), bool)
        mask[test.user, test.item] = True
        return (train_m >= args.threshold).astype(np.int64), test_m >= args.threshold, mask
    coat = load_coat(None if args.data_dir is None else args.data_dir)
    return (
        binarize(coat.train, threshold=args.threshold),
        binarize(coat.test, threshold=args.threshold).astype(bool),
        coat.test > 0,
    )


def _format_table(header: list[str], rows: list[list[Any]]) -> str:
    def cell(v: Any) -> str:
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    text = [[cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[c]) for r in text)) for c, h in enumerate(header)]
    lines = [" | ".join(h.rjust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("-|-".join("-" * w for w in widths))
    lines += [" | ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)) for r in text]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Entry point of ``jaxcal sweep``."""
    import jax

    model_cls = getattr(recsys, MODELS[args.model])
    grid = parse_grid(args.grid) or {"replicate": [0]}
    model = model_cls(**parse_settings(model_cls, args.set))
    if isinstance(args.k, bool) or args.k < 1:
        raise ValueError(f"--k must be >= 1; got {args.k}.")
    devices = None
    if args.devices is not None:
        available = jax.devices()
        if not 1 <= args.devices <= len(available):
            raise ValueError(f"--devices must lie in [1, {len(available)}]; got {args.devices}.")
        devices = available[: args.devices]

    log("loading data ...", quiet=args.quiet)
    train, test_labels, test_mask = _load_data(args)
    n_models = int(np.prod([len(v) for v in grid.values()]))
    log(
        f"training {n_models} {model_cls.__name__} model(s) on {int(train.sum())} positives "
        f"({train.shape[0]} users x {train.shape[1]} items) in one compiled program ...",
        quiet=args.quiet,
    )
    start = time.perf_counter()
    result = recsys.sweep(model, train, key=jax.random.key(args.key), grid=grid, devices=devices)
    jax.block_until_ready(result.models)
    elapsed = time.perf_counter() - start
    log(f"trained {len(result)} models in {elapsed:.1f}s (compilation included)", quiet=args.quiet)

    header = ["k", *result.names, "auc", f"ndcg@{args.k}", f"recall@{args.k}", "final_loss"]
    rows = []
    losses = np.asarray(result.models.train_loss)
    for k in progress(range(len(result)), "evaluating", quiet=args.quiet):
        scores = result.select(k).predict_all()
        config = result.configs[k]
        rows.append(
            [
                k,
                *(config[n] for n in result.names),
                float(auc(scores, test_labels, mask=test_mask)),
                float(ndcg_at_k(scores, test_labels, k=args.k, mask=test_mask)),
                float(recall_at_k(scores, test_labels, k=args.k, mask=test_mask)),
                float(np.mean(losses[k, -max(1, losses.shape[1] // 10) :])),
            ]
        )
    print(_format_table(header, rows))
    best = max(rows, key=lambda r: r[len(result.names) + 1])
    chosen = " ".join(f"{n}={best[1 + c]}" for c, n in enumerate(result.names))
    print(f"best by AUC: k={best[0]} {chosen}")
    if args.output:
        with open(args.output, "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(header)
            writer.writerows(rows)
        log(f"wrote {args.output}", quiet=args.quiet)
    if args.save:
        result.save(args.save)
        log(f"saved the {len(result)} fitted models to {args.save}", quiet=args.quiet)
    return 0
