"""Field-aware calibration on Coat: global / per-field isotonic, SIR and neural calibration.

Protocol (after Pan et al., WWW 2020: base model on D_train, calibrator on D_dev, metrics on
D_test), on the Coat shopping data (Schnabel et al., ICML 2016):

1. Base model: logistic matrix factorisation (user and item biases + 8-dim factors, L2)
   trained with Adam on the *self-selected* (MNAR) training ratings, label = rating >= 4.
   Selection bias makes it over-predict on the uniformly random (MAR) test ratings.
2. The MAR test ratings are split at random into a calibration half and an evaluation half
   (``--repeats`` splits; numbers are mean +- sd over splits).
3. Calibrators fitted on the calibration half: global isotonic regression, per-field
   isotonic regression (one isotonic map per value of ``--per-field``), SIR (smoothed
   isotonic, if ``jaxcal.SmoothedIsotonic`` is available), and NeuralCalibration with the
   8 categorical user/item fields (user gender, age, location, fashion interest; item
   gender, jacket type, colour, on front page).
4. Metrics on the evaluation half: ECE (15 equal-width bins), debiased ECE, smooth ECE,
   Field-ECE and Field-RCE averaged over the 8 fields, NLL and AUC.

    python experiments/field_calibration.py --out results/field_calibration [--repeats 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

import jaxcal
from jaxcal.data import load_coat
from jaxcal.metrics import auc, debiased_ece, ece, field_ece, field_rce, nll, smooth_ece


def categorical_fields(onehot: np.ndarray, names: list[str]) -> tuple[np.ndarray, list[str]]:
    """One-hot column groups (``"prefix:value"``) -> ``[rows, groups]`` integer fields."""
    prefixes = list(dict.fromkeys(n.split(":")[0] for n in names))
    cols = []
    for pre in prefixes:
        idx = [i for i, n in enumerate(names) if n.split(":")[0] == pre]
        cols.append(np.argmax(onehot[:, idx], axis=1))
    return np.stack(cols, axis=1), prefixes


def train_base_model(train: np.ndarray, *, dim: int = 8, l2: float = 0.05, steps: int = 800):
    """Logistic MF on the observed MNAR ratings; returns a ``[users, items]`` logit matrix."""
    users, items = np.nonzero(train)
    labels = (train[users, items] >= 4).astype(np.float64)
    n_users, n_items = train.shape
    key = jax.random.key(0)
    k1, k2 = jax.random.split(key)
    params = {
        "b": jnp.zeros(()),
        "bu": jnp.zeros(n_users),
        "bi": jnp.zeros(n_items),
        "P": 0.1 * jax.random.normal(k1, (n_users, dim)),
        "Q": 0.1 * jax.random.normal(k2, (n_items, dim)),
    }

    def logits(p, u, i):
        return p["b"] + p["bu"][u] + p["bi"][i] + jnp.sum(p["P"][u] * p["Q"][i], axis=-1)

    def loss(p):
        z = logits(p, users, items)
        data = jnp.mean(jax.nn.softplus(z) - labels * z)
        reg = sum(jnp.sum(p[k] ** 2) for k in ("bu", "bi", "P", "Q")) / labels.shape[0]
        return data + l2 * reg

    opt = optax.adam(0.05)

    @jax.jit
    def run(p):
        def step(carry, _):
            p, s = carry
            g = jax.grad(loss)(p)
            u, s = opt.update(g, s, p)
            return (optax.apply_updates(p, u), s), None

        (p, _), _ = jax.lax.scan(step, (p, opt.init(p)), None, length=steps)
        return p

    params = run(params)
    return np.asarray(
        params["b"] + params["bu"][:, None] + params["bi"][None, :] + params["P"] @ params["Q"].T
    )


def per_field_isotonic(cal_s, cal_y, cal_f, eval_s, eval_f, global_probs):
    """One isotonic map per field value, all fitted in one grouped PAV call
    (``jaxcal.isotonic_regression(..., group=)``), predicted by linear interpolation between
    the fitted points (as ``IsotonicCalibration(interpolation="linear")``). Field values
    absent from the calibration half keep the global map's prediction."""
    fitted = np.asarray(jaxcal.isotonic_regression(cal_s, cal_y, group=cal_f, y_min=0, y_max=1))
    out = np.array(global_probs)
    for v in np.unique(eval_f):
        m_cal, m_eval = cal_f == v, eval_f == v
        if not m_cal.any():
            continue
        order = np.argsort(cal_s[m_cal], kind="stable")
        xs, ys = cal_s[m_cal][order], fitted[m_cal][order]
        xs, first = np.unique(xs, return_index=True)  # tied scores share one fitted value
        out[m_eval] = np.interp(eval_s[m_eval], xs, ys[first])
    return out


def smoothed_isotonic():
    try:
        return jaxcal.SmoothedIsotonic()
    except (ImportError, AttributeError):
        return None


def evaluate(probs, labels, fields, *, key):
    p = np.clip(np.asarray(probs, np.float64), 0.0, 1.0)
    return {
        "ECE": float(ece(p, labels)),
        "dECE": float(debiased_ece(p, labels, n_bins=10)),
        "smECE": float(smooth_ece(p, labels)),
        "Field-ECE": float(np.mean(np.asarray(field_ece(p, labels, fields)))),
        "Field-RCE": float(np.mean(np.asarray(field_rce(p, labels, fields)))),
        "NLL": float(nll(p, labels, eps=1e-6)),
        "AUC": float(auc(p, labels)),
    }


def plot_fields(results_probs, labels, fields, field_names, path):
    """Per-field-value observed vs mean predicted rate (one panel per field)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n_f = fields.shape[1]
    fig, axes = plt.subplots(2, (n_f + 1) // 2, figsize=(4 * ((n_f + 1) // 2), 7))
    for f, ax in zip(range(n_f), axes.ravel(), strict=False):
        vals = np.unique(fields[:, f])
        obs = [labels[fields[:, f] == v].mean() for v in vals]
        ax.plot(vals, obs, "ko-", label="observed", lw=2)
        for name, p in results_probs.items():
            ax.plot(vals, [p[fields[:, f] == v].mean() for v in vals], ".--", label=name)
        ax.set_title(field_names[f])
        ax.set_xlabel("field value")
        ax.set_ylabel("positive rate")
    axes.ravel()[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    coat = load_coat(args.data)
    uf, un = categorical_fields(coat.user_features, coat.user_feature_names)
    itf, itn = categorical_fields(coat.item_features, coat.item_feature_names)
    field_names = [f"user.{n}" for n in un] + [f"item.{n}" for n in itn]
    print(f"fields: {', '.join(field_names)}", file=sys.stderr)
    logit_matrix = train_base_model(coat.train)
    users, items = np.nonzero(coat.test)
    scores = logit_matrix[users, items]
    labels = (coat.test[users, items] >= 4).astype(np.float64)
    fields = np.concatenate([uf[users], itf[items]], axis=1)
    per_field = field_names.index(args.per_field)
    print(
        f"MAR test ratings: {labels.size}, positive rate {labels.mean():.3f}; base model mean "
        f"prediction {np.mean(1 / (1 + np.exp(-scores))):.3f} [{time.perf_counter() - t0:.1f}s]",
        file=sys.stderr,
    )
    sir = smoothed_isotonic()
    rows: dict[str, list[dict[str, float]]] = {}
    rng = np.random.default_rng(args.seed)
    last_probs = {}
    for r in range(args.repeats):
        perm = rng.permutation(labels.size)
        cal, ev = perm[: labels.size // 2], perm[labels.size // 2 :]
        s_c, y_c, f_c = scores[cal], labels[cal], fields[cal]
        s_e, y_e, f_e = scores[ev], labels[ev], fields[ev]
        probs = {"uncalibrated": 1 / (1 + np.exp(-s_e))}
        probs["global isotonic"] = np.asarray(
            jaxcal.IsotonicCalibration().fit(s_c, y_c).predict(s_e)
        )
        probs[f"per-field isotonic ({args.per_field})"] = per_field_isotonic(
            s_c, y_c, f_c[:, per_field], s_e, f_e[:, per_field], probs["global isotonic"]
        )
        if sir is not None:
            try:
                probs["SIR"] = np.asarray(sir.fit(s_c, y_c).predict(s_e))
            except Exception as exc:  # noqa: BLE001 - report and go on without SIR
                print(f"SIR failed, skipped: {type(exc).__name__}: {exc}", file=sys.stderr)
                sir = None
        neural = jaxcal.NeuralCalibration(
            n_knots=args.knots,
            isotonic_penalty=args.isotonic_penalty,
            l2=args.l2,
            n_steps=args.steps,
            hidden=(16,),
        ).fit(
            s_c,
            y_c,
            f_c,
            cardinalities=tuple(int(c) for c in fields.max(0) + 1),
            key=jax.random.key(r),
        )
        probs["neural (fields)"] = np.asarray(neural.predict(s_e, f_e))
        for name, p in probs.items():
            rows.setdefault(name, []).append(evaluate(p, y_e, f_e, key=jax.random.key(r)))
        last_probs = probs
        print(f"split {r + 1}/{args.repeats} [{time.perf_counter() - t0:.1f}s]", file=sys.stderr)

    metrics = list(next(iter(rows.values()))[0])
    lines = [
        "| method | " + " | ".join(metrics) + " |",
        "|---|" + "---|" * len(metrics),
    ]
    for name, reps in rows.items():
        cells = []
        for m in metrics:
            v = np.array([rep[m] for rep in reps])
            cells.append(f"{v.mean():.4f} ± {v.std():.4f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    print(table)
    (out / "table.md").write_text(table + "\n")
    if sir is None:
        print("(SIR skipped: jaxcal.SmoothedIsotonic is not available)", file=sys.stderr)

    if not args.no_plots:
        from jaxcal.plot import reliability_diagram

        reliability_diagram(
            last_probs, y_e, out / "reliability.png", title="Coat MAR evaluation half"
        )
        plot_fields(last_probs, y_e, f_e, field_names, out / "fields.png")
        print(f"plots: {out / 'reliability.png'}, {out / 'fields.png'}", file=sys.stderr)
    print(f"done [{time.perf_counter() - t0:.1f}s]", file=sys.stderr)
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="results/field_calibration", help="output folder")
    parser.add_argument("--data", default=None, help="Coat folder (default: $JAXCAL_DATA_DIR)")
    parser.add_argument("--repeats", type=int, default=5, help="random calibration splits")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per-field", default="item.jackettype", help="field of per-field IR")
    parser.add_argument("--knots", type=int, default=10, help="knots of the neural eta")
    parser.add_argument("--isotonic-penalty", type=float, default=1.0)
    parser.add_argument("--l2", type=float, default=1e-2, help="L2 on the field network")
    parser.add_argument("--steps", type=int, default=1500, help="Adam steps (full batch)")
    parser.add_argument("--no-plots", action="store_true")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    sys.exit(run(parser.parse_args()))
