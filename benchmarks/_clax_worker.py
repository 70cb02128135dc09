"""The CLAX side of ``benchmarks/bench_clax.py``; runs in CLAX's own virtual environment.

CLAX (PyPI ``clax-models``) needs an older JAX than jaxcal, so this script runs under the
CLAX environment's Python and never imports jaxcal. It reads the logs that the driver wrote
(one npz: ``{train,valid,test}_{query,doc,clicks,mask}``), trains CLAX's models with CLAX's
own ``Trainer`` and writes, per model, the conditional click probabilities
``P(C_r = 1 | C_<r)`` of the test sessions and the wall time.

What is timed (``time.perf_counter``, the predictions blocked with ``jax.block_until_ready``)
is what a CLAX user runs, from the raw ids to the test predictions:

1. map the (query, document) pairs of train, validation and test sessions to embedding ids
   ``1..P`` (0 is CLAX's padding id), one id per pair of the whole log (CLAX's Yandex and
   Baidu-ULTR data sets come with such ``query_doc_ids``);
2. build the model (default parameters: one logit embedding per pair plus a shared learned
   baseline; position / UBM examination tables; DBN's global continuation);
3. ``Trainer(optimizer=optax.adamw(lr), epochs=E).train(model, train, valid)``: AdamW on
   the conditional-click cross-entropy with CLAX's default early stopping on the validation
   loss (``patience=0, min_delta=1e-5``, best state restored). Training mini-batches are cut
   from the in-memory arrays in a new random order each epoch, leaving out the last partial
   batch (the cheapest loader: no parquet, no per-session Python; one batch shape, so one
   compile of the step); the validation sessions form one batch. The validation metrics
   are the loss and the log-likelihood only: CLAX's default set adds the unconditional
   perplexity, whose UBM marginal (an unrolled sum over all last-click positions) takes
   over a minute to compile on a 2-core CPU, for a number that early stopping does not use;
4. ``model.predict_conditional_clicks`` on all test sessions (one jitted call).

Pairs unseen in training keep their initial embedding (near zero, shrunk further by
AdamW's weight decay), so CLAX predicts them from the learned baseline logit alone, a
global attractiveness (satisfaction for DBN) fitted on all pairs.

Learning rate: CLAX's README trains with ``adamw(0.003)`` for 50 epochs; at a batch of 512
sessions that is too few steps for a log of a few thousand sessions (TianGong-ST's demo: 5
steps an epoch), and a larger rate converges in fewer epochs on mid-size logs. So each model
is trained at every rate of ``--lr`` (default 0.003, 0.03, 0.1) and the one of least
validation loss is kept: model selection on CLAX's own validation split, as a CLAX user
would tune it. The time of a model is that of its selected run; the total over the rates
is reported too.

The first run of a setting includes compiling CLAX's train and test steps (each ``Trainer``
compiles its own); the warm run repeats steps 1-4 for the selected rate with a fresh model
(same seed) and the same ``Trainer``, so nothing is compiled again.

    python benchmarks/_clax_worker.py --data LOGS.npz --out RESULT.npz --models PBM,UBM,DBN
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from importlib.metadata import version

os.environ.setdefault("PTABLE_INTERACTIVE", "0")  # CLAX's progress table: plain rows

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from clax import (  # noqa: E402
    DynamicBayesianNetwork,
    PositionBasedModel,
    Trainer,
    UserBrowsingModel,
)
from clax.metrics import LogLikelihood  # noqa: E402
from flax import nnx  # noqa: E402

SPLITS = ("train", "valid", "test")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def make_model(name: str, n_pairs: int, n_results: int, seed: int):
    rngs = nnx.Rngs(seed)
    if name == "PBM":
        return PositionBasedModel(positions=n_results, query_doc_pairs=n_pairs, rngs=rngs)
    if name == "UBM":
        return UserBrowsingModel(positions=n_results, query_doc_pairs=n_pairs, rngs=rngs)
    if name == "DBN":
        return DynamicBayesianNetwork(query_doc_pairs=n_pairs, rngs=rngs)
    raise ValueError(f"no CLAX model for {name!r}; choose PBM, UBM or DBN.")


def encode(logs: dict[str, np.ndarray]) -> tuple[dict[str, dict[str, np.ndarray]], int]:
    """CLAX batches (``query_doc_ids``, 1-based ``positions``, ``mask``, ``clicks``) of the
    three splits, with one embedding id per (query, document) pair of the whole log."""
    keys = {
        s: (logs[f"{s}_query"].astype(np.int64)[:, None] << 31) | logs[f"{s}_doc"] for s in SPLITS
    }
    shown = np.concatenate([keys[s][logs[f"{s}_mask"]] for s in SPLITS])
    vocab = np.unique(shown)
    out = {}
    for s in SPLITS:
        mask = logs[f"{s}_mask"].astype(bool)
        ids = np.searchsorted(vocab, keys[s]).astype(np.int32) + 1
        n = mask.shape[1]
        positions = np.broadcast_to(np.arange(1, n + 1, dtype=np.int32), mask.shape)
        out[s] = {
            "query_doc_ids": np.where(mask, ids, 0),
            "positions": np.where(mask, positions, 0),
            "mask": mask,
            "clicks": np.where(mask, logs[f"{s}_clicks"], 0).astype(np.float32),
        }
    return out, int(vocab.shape[0])


class Batches:
    """Mini-batches of in-memory arrays, in a new random order each pass when ``shuffle``.

    With ``drop_last`` every batch has ``batch_size`` rows (the last, partial one of a
    pass is left out, a different one each pass), so CLAX's step compiles once.
    """

    def __init__(self, arrays, batch_size: int, *, shuffle: bool, drop_last: bool, seed=0):
        self.arrays, self.shuffle, self.drop_last = arrays, shuffle, drop_last
        self.n = next(iter(arrays.values())).shape[0]
        self.batch_size = min(batch_size, self.n)
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return self.n // self.batch_size if self.drop_last else -(-self.n // self.batch_size)

    def __iter__(self):
        order = self.rng.permutation(self.n) if self.shuffle else np.arange(self.n)
        for start in range(0, len(self) * self.batch_size, self.batch_size):
            rows = order[start : start + self.batch_size]
            yield {k: v[rows] for k, v in self.arrays.items()}


@nnx.jit
def _predict_conditional(model, batch):
    return jnp.exp(model.predict_conditional_clicks(batch))


def train_and_predict(name: str, logs, trainer: Trainer, args) -> tuple[np.ndarray, float, dict]:
    """Steps 1-4 of the module docstring; ``(test probabilities, seconds, training info)``."""
    t0 = time.perf_counter()
    data, n_pairs = encode(logs)
    n_results = data["train"]["mask"].shape[1]
    model = make_model(name, n_pairs, n_results, args.seed)
    train = Batches(data["train"], args.batch_size, shuffle=True, drop_last=True, seed=args.seed)
    valid = Batches(data["valid"], args.eval_batch_size, shuffle=False, drop_last=False)
    sink = sys.stderr if args.verbose else open(os.devnull, "w")  # noqa: SIM115
    with contextlib.redirect_stdout(sink):
        history = trainer.train(model, train, valid, click_metrics={"ll": LogLikelihood()})
    if sink is not sys.stderr:
        sink.close()
    model.eval()
    probs = jax.block_until_ready(_predict_conditional(model, data["test"]))
    seconds = time.perf_counter() - t0
    stopped = bool(history["should_stop"].iloc[-1])
    # the state CLAX returns: the last improving epoch after early stopping, else the last
    kept = history[history["has_improved"]].iloc[-1] if stopped else history.iloc[-1]
    info = {"epochs": len(history), "stopped": stopped, "val_loss": float(kept["val_loss"])}
    return np.asarray(probs, np.float32), seconds, info


def fit_model(name: str, logs, args) -> dict:
    """Train ``name`` at each learning rate of ``--lr``, keep the one of least validation
    loss, and time it again warm; the result arrays of that model."""
    runs = []
    for lr in args.lr:
        trainer = Trainer(optimizer=optax.adamw(lr), epochs=args.epochs)
        probs, first, info = train_and_predict(name, logs, trainer, args)
        log(
            f"  CLAX {name} lr {lr:g}: validation loss {info['val_loss']:.5f} after "
            f"{info['epochs']} epochs (early stop: {info['stopped']}), {first:.2f} s"
        )
        runs.append((info["val_loss"], lr, trainer, probs, first, info))
    _, lr, trainer, probs, first, info = min(runs, key=lambda run: run[0])
    warm = np.nan
    if not args.no_warm:
        _, warm, info_warm = train_and_predict(name, logs, trainer, args)
        if info_warm["epochs"] != info["epochs"]:
            log(f"  note: CLAX {name} warm run took {info_warm['epochs']} epochs")
        log(f"  CLAX {name} lr {lr:g} warm: {warm:.2f} s")
    return {
        "probs": probs,
        "first_s": first,
        "warm_s": warm,
        "grid_s": sum(run[4] for run in runs),
        "lr": lr,
        "epochs": info["epochs"],
        "stopped": info["stopped"],
        "val_loss": info["val_loss"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="npz written by bench_clax.py")
    ap.add_argument("--out", required=True, help="npz to write")
    ap.add_argument("--models", default="PBM,UBM,DBN")
    ap.add_argument("--epochs", type=int, default=50, help="at most (early stopping)")
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--eval-batch-size", type=int, default=1 << 20, help="validation rows per step")
    ap.add_argument(
        "--lr",
        type=lambda s: [float(v) for v in s.split(",")],
        default=[0.003, 0.03, 0.1],
        help="AdamW learning rates to try (comma-separated); the least validation loss wins",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-warm", action="store_true", help="skip the warm (second) run")
    ap.add_argument("--verbose", action="store_true", help="CLAX's per-epoch table on stderr")
    args = ap.parse_args()

    with np.load(args.data) as f:
        logs = {k: f[k] for k in f.files}
    result = {
        "clax_version": np.asarray(version("clax-models")),
        "jax_version": np.asarray(jax.__version__),
        "device": np.asarray(jax.devices()[0].platform),
    }
    for name in args.models.split(","):
        for key, value in fit_model(name, logs, args).items():
            result[f"{name}_{key}"] = np.asarray(value)
    np.savez(args.out, **result)


if __name__ == "__main__":
    main()
