"""``jaxcal sweep``: the printed / CSV table equals models fitted one by one through the
public API and scored with scikit-learn's per-user AUC; bad arguments raise ValueError."""

from __future__ import annotations

import argparse
import csv

import jax
import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from jaxcal.cli import sweep as sweep_cli
from jaxcal.recsys import BPRMF

AUC_TOL = 1e-10


def _parse(argv):
    parser = argparse.ArgumentParser(prog="jaxcal")
    sweep_cli.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["sweep", *argv])


def _write(path, matrix, one_based):
    users, items = np.nonzero(matrix)
    with open(path, "w") as fh:
        fh.write("# user item rating\n")
        for u, i in zip(users, items, strict=True):
            fh.write(f"{u + one_based}\t{i + one_based}\t{matrix[u, i]}\n")


def test_sweep_cli_table_matches_separate_fits(tmp_path, capsys):
    rng = np.random.default_rng(0)
    n_users, n_items = 12, 15
    ratings = rng.integers(1, 6, size=(n_users, n_items))
    observed = rng.uniform(size=ratings.shape) < 0.5
    train = np.where(observed, ratings, 0)
    train[:, 0] = 5  # every user has a positive
    test = np.where(~observed, ratings, 0)
    test[:, 0] = 0
    _write(tmp_path / "train.tsv", train, 1)
    _write(tmp_path / "test.tsv", test, 1)
    out = tmp_path / "table.csv"
    saved = tmp_path / "sweep.npz"
    args = _parse(
        f"bpr --train {tmp_path / 'train.tsv'} --test {tmp_path / 'test.tsv'} --one-based "
        f"--grid learning_rate=0.01,0.1 --grid replicate=0,3 --set rank=3 --set n_steps=30 "
        f"--set batch_size=8 "
        f"--k 3 --key 5 --output {out} --save {saved} --quiet".split()
    )
    assert args.func(args) == 0
    printed = capsys.readouterr().out
    assert "best by AUC" in printed and "ndcg@3" in printed
    with open(out) as fh:
        rows = list(csv.DictReader(fh))
    assert [(float(r["learning_rate"]), int(r["replicate"])) for r in rows] == [
        (0.01, 0),
        (0.01, 3),
        (0.1, 0),
        (0.1, 3),
    ]
    labels, mask = test >= 4, test > 0
    for row in rows:
        model = BPRMF(rank=3, n_steps=30, batch_size=8, learning_rate=float(row["learning_rate"]))
        key = jax.random.fold_in(jax.random.key(5), int(row["replicate"]))
        scores = np.asarray(model.fit(train >= 4, key=key).predict_all())
        per_user = [
            roc_auc_score(labels[u, mask[u]], scores[u, mask[u]])
            for u in range(n_users)
            if 0 < labels[u, mask[u]].sum() < mask[u].sum()
        ]
        assert abs(float(row["auc"]) - np.mean(per_user)) < AUC_TOL


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        ("bpr --grid learning_rate", "NAME=VALUE"),
        ("bpr --grid learning_rate=0.1 --grid learning_rate=0.2", "twice"),
        ("bpr --grid learning_rate=fast", "not a number"),
        ("bpr --set depth=3", "no hyperparameter 'depth'"),
        ("bpr --set rank=2.5", "integer"),
        ("bpr --set rank=0", "rank must be an integer >= 1"),
        ("bpr --train x.tsv", "both --train and --test"),
        ("bpr --k 0", "--k"),
        ("ncf --grid rank=8,16", "cannot sweep 'rank'"),
    ],
)
def test_bad_arguments_raise(argv, match):
    args = _parse([*argv.split(), "--quiet"])
    with pytest.raises(ValueError, match=match):
        args.func(args)


def test_parse_settings_types():
    from jaxcal.recsys import NCF

    got = sweep_cli.parse_settings(
        NCF, ["hidden=8,4", "optimizer=sgd", "learning_rate=1e-3", "rank=4"]
    )
    assert got == {"hidden": (8, 4), "optimizer": "sgd", "learning_rate": 1e-3, "rank": 4}
