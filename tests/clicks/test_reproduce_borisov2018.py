"""The Borisov (2018) protocol wiring: rows are the three fitted/calibrated variants scored on
the test log, the CLI is registered."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxcal.clicks import DCM, calibrate_click_model, example_params, perplexity, simulate
from jaxcal.reproduce import borisov2018


@pytest.mark.slow  # ~20 s CPU: 3 fits x 2 priors + calibrations, compiles
def test_run_study_rows_match_direct_computation():
    p = example_params("DCM", n_queries=5, key=jax.random.key(0))
    train, dev, test = (
        simulate("DCM", p, n, key=jax.random.key(i)) for i, n in enumerate((800, 200, 200))
    )
    priors = ((1, 2), (3, 10))
    res = borisov2018.run_study(
        (train, dev, test), models=("DCM",), priors=priors, quiet=True, name="t"
    )
    rows = np.asarray(res["DCM"]["marginal"])
    assert rows.shape == (2, 3)
    for i, prior in enumerate(priors):
        base = DCM().fit(train, prior=prior)
        both = DCM().fit(train.concatenate([train, dev]), prior=prior)
        cal = calibrate_click_model(base, dev)
        want = [
            perplexity(np.clip(m.predict_marginal(test), 1e-6, 1 - 1e-6), test.clicks).average
            for m in (base, both, cal)
        ]
        np.testing.assert_allclose(rows[i], np.asarray(want, float), rtol=1e-10)
    table = borisov2018.summarise(res)["DCM"]
    np.testing.assert_allclose(table["mean"], rows.mean(0), rtol=1e-12)
    np.testing.assert_allclose(table["var100"], 100 * rows.var(0, ddof=1), rtol=1e-12)
    assert len(borisov2018.PRIORS) == 24 and borisov2018.PRIORS[0] == (1, 2)


def test_cli_registers_the_study(capsys):
    from jaxcal.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["reproduce", "borisov2018", "--help"])
    assert exc.value.code == 0
    assert "--sim-sessions" in capsys.readouterr().out
