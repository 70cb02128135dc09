"""The conventions of docs/api.md for the score models: ``fit`` returns the model's
``fitted_class`` with the dtype of the scores (float32 scores give float32 parameters with x64
enabled, as in this suite), the float32 fit agrees with the float64 one, and the
hyperparameters are checked when a model is made (a ``ValueError`` naming the field)."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from jaxcal import scoremodels
from jaxcal.scoremodels import GaussianMixtureScoreModel, GaussianScoreModel

# every exported score model
MODELS = [getattr(scoremodels, n) for n in scoremodels.__all__ if n.endswith("ScoreModel")]
# float32 against float64 fits of the same data: float32 rounding of sums over 300 scores,
# amplified by the Gamma shape's Newton solve (relative)
F32_RTOL = 1e-4
# the mixture's EM converges slowly along flat directions of its likelihood (here the float64
# fit stops at max_iter, the float32 one when its log-likelihood stops changing): its
# parameters differ by ~0.5%, its probabilities by ~4e-4 (absolute)
MIXTURE_PROB_ATOL = 2e-3


def _data(n=300, seed=0):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.4).astype(float)
    s = rng.gamma(np.where(y == 1, 6.0, 2.0), 0.5)  # positive: in every model's support
    return s, y


def _float_leaves(params):
    return {
        f.name: getattr(params, f.name)
        for f in dataclasses.fields(params)
        if np.issubdtype(np.asarray(getattr(params, f.name)).dtype, np.floating)
    }


@pytest.mark.parametrize("cls", MODELS, ids=lambda c: c.__name__)
def test_fit_returns_the_fitted_class_in_the_dtype_of_the_scores(cls):
    model = cls()
    s, y = _data()
    p64 = model.fit(s, y)
    p32 = model.fit(s.astype(np.float32), y)
    traced = jax.jit(lambda s, y: model.fit(s, y))(s.astype(np.float32), y.astype(np.float32))
    for params, dtype in ((p64, np.float64), (p32, np.float32), (traced, np.float32)):
        assert isinstance(params, model.fitted_class)
        leaves = _float_leaves(params)
        assert leaves
        assert {k: np.asarray(v).dtype for k, v in leaves.items()} == dict.fromkeys(
            leaves, np.dtype(dtype)
        )
    if cls is GaussianMixtureScoreModel:
        probs32 = model.predict(p32, s.astype(np.float32))
        np.testing.assert_allclose(probs32, model.predict(p64, s), atol=MIXTURE_PROB_ATOL)
        return
    ref = _float_leaves(p64)
    for k, v in _float_leaves(p32).items():
        np.testing.assert_allclose(np.asarray(v, np.float64), ref[k], rtol=F32_RTOL, err_msg=k)


def _bad_values(field):
    if field.type in ("int", int):
        return [0, -1, 2.5, True]
    if field.name == "tol":
        return [-1e-3, float("nan")]
    return [0.0, -1.0, float("inf"), float("nan"), "1.0"]


@pytest.mark.parametrize("cls", MODELS, ids=lambda c: c.__name__)
def test_hyperparameters_are_checked_when_the_model_is_made(cls):
    fields = dataclasses.fields(cls)
    assert fields
    for field in fields:
        for bad in _bad_values(field):
            with pytest.raises(ValueError, match=f"^{field.name} must be"):
                cls(**{field.name: bad})
    if any(f.name == "tol" for f in fields):  # 0: iterate to max_iter
        assert cls(tol=0.0).tol == 0.0


def test_a_changed_hyperparameter_is_checked_too():
    with pytest.raises(ValueError, match="scale_scale"):
        dataclasses.replace(GaussianScoreModel(), scale_scale=-2.0)
