"""The public surface of the click models: run options checked when made, typed fitted
classes, and required keys of the simulator."""

from __future__ import annotations

import dataclasses
import typing

import jax
import numpy as np
import pytest

import jaxcal.clicks as clicks
from jaxcal.clicks import (
    MODELS,
    ClickModelFit,
    RunOptions,
    Sessions,
    example_params,
    simulate,
)

_NAMES = {"CM": "CascadeModel"}  # simulator name -> class name, where they differ


def _log(name="PBM", n=300, seed=0) -> Sessions:
    truth = example_params(name, n_queries=3, n_docs=10, n_results=5, key=jax.random.key(seed))
    return simulate(name, truth, n, key=jax.random.key(seed + 1))


@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({"dedup": "yes"}, "dedup"),
        ({"dedup": 1}, "dedup"),
        ({"progress": None}, "progress"),
        ({"chunk_sessions": 0}, "chunk_sessions"),
        ({"chunk_sessions": True}, "chunk_sessions"),
        ({"chunk_sessions": 10.0}, "chunk_sessions"),
        ({"spill": 3}, "spill"),
        ({"spill": None}, "spill"),
        ({"mesh": "devices"}, "mesh"),
    ],
)
def test_bad_run_options_raise_when_made_and_name_the_option(options, name):
    with pytest.raises(ValueError, match=f"^{name} must"):
        RunOptions(**options)


def test_a_spill_path_that_is_a_file_is_refused_when_made(tmp_path):
    path = tmp_path / "f"
    path.write_text("")
    with pytest.raises(ValueError, match="spill must be a folder"):
        RunOptions(spill=path)
    assert RunOptions(spill=tmp_path / "new").streams  # a folder made by the fit


def test_run_options_are_frozen_and_fit_takes_only_them():
    run = RunOptions(chunk_sessions=100)
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.dedup = False  # type: ignore[misc]
    with pytest.raises(TypeError):
        RunOptions(100)  # keyword-only
    model = MODELS["PBM"]()
    with pytest.raises(ValueError, match="run must be a jaxcal.clicks.RunOptions"):
        model.fit(_log(), run={"dedup": False})  # type: ignore[arg-type]
    for old in ("dedup", "mesh", "chunk_sessions", "spill", "verbose"):
        with pytest.raises(TypeError, match=old):
            model.fit(_log(), **{old: None})


def test_progress_lines_only_when_asked(capsys):
    """A streamed fit prints one line per EM iteration with ``progress=True`` and nothing
    without; the two fits are the same."""
    log = _log(n=400)
    quiet = MODELS["PBM"]().fit(log, max_iter=4, tol=0.0, run=RunOptions(chunk_sessions=150))
    assert capsys.readouterr().err == ""
    run = RunOptions(chunk_sessions=150, progress=True)
    loud = MODELS["PBM"]().fit(log, max_iter=4, tol=0.0, run=run)
    err = capsys.readouterr().err
    assert [f"PBM iteration {k}:" in err for k in (1, 4)] == [True, True]
    assert "PBM iteration 5:" not in err
    for k in quiet.params:
        np.testing.assert_array_equal(loud.params[k], quiet.params[k])


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_fitted_class_is_exported_and_is_what_fit_returns(name):
    estimator = MODELS[name]
    fitted_class = estimator.fitted_class
    cls_name = _NAMES.get(name, name)
    assert estimator is getattr(clicks, cls_name)
    assert fitted_class is getattr(clicks, f"Fitted{cls_name}")
    assert "Fitted" + cls_name in clicks.__all__ and issubclass(fitted_class, ClickModelFit)
    # the estimator is a ClickModel[Fitted<Name>]: fit's return type for type checkers
    (base,) = estimator.__orig_bases__
    assert typing.get_args(base) == (fitted_class,)
    assert dataclasses.fields(estimator()) == ()  # no hyperparameters: nothing to check
    fitted = estimator().fit(_log(name), max_iter=3)
    assert type(fitted) is fitted_class and fitted.model_name == name


def test_simulator_keys_are_required_and_checked():
    with pytest.raises(TypeError, match="key"):
        example_params("DBN")  # type: ignore[call-arg]
    for bad in (None, 0, "0", jax.random.split(jax.random.key(0), 2)):
        with pytest.raises(ValueError, match="key"):
            example_params("DBN", key=bad)
        with pytest.raises(ValueError, match="key"):
            simulate("PBM", example_params("PBM", key=jax.random.key(0)), 5, key=bad)
    # a legacy raw key draws what the typed key of the same seed draws
    typed = example_params("DBN", key=jax.random.key(4))
    legacy = example_params("DBN", key=jax.random.PRNGKey(4))
    for k in typed:
        np.testing.assert_array_equal(typed[k], legacy[k])
    a = simulate("DBN", typed, 50, key=jax.random.key(1))
    b = simulate("DBN", typed, 50, key=jax.random.PRNGKey(1))
    np.testing.assert_array_equal(a.clicks, b.clicks)
    with pytest.raises(ValueError, match="n_queries"):
        example_params("DBN", n_queries=0, key=jax.random.key(0))
