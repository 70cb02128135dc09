"""Invalid inputs (NaN / inf scores, labels not 0/1, length mismatch, empty input, one
class, negative weights, propensities outside (0, 1]) raise a clear ValueError."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxcal._validation import (
    check_batch_inputs,
    check_finite_array,
    check_fit_inputs,
    check_key,
    check_propensity,
)

S = np.array([0.1, 0.5, 0.9, 0.3])
Y = np.array([0, 1, 1, 0])


@pytest.mark.parametrize(
    ("scores", "labels", "weights", "match"),
    [
        (np.array([0.1, np.nan, 0.9, 0.3]), Y, None, "NaN"),
        (np.array([0.1, np.inf, 0.9, 0.3]), Y, None, "inf"),
        (S, np.array([0, 1, 2, 3]), None, "0/1"),
        (S, Y[:3], None, "length mismatch"),
        (np.array([]), np.array([]), None, "empty"),
        (S, np.ones(4), None, "one class"),
        (S, Y, np.array([1.0, -1.0, 1.0, 1.0]), "non-negative"),
        (S, Y, np.array([0.0, 1.0, 1.0, 0.0]), "one class"),
    ],
)
def test_fit_inputs_raise(scores, labels, weights, match):
    with pytest.raises(ValueError, match=match):
        check_fit_inputs(scores, labels, weights)


def test_propensity_must_be_positive():
    with pytest.raises(ValueError, match="> 0"):
        check_propensity(np.array([0.5, 0.0, 0.2, 1.0]), 4)
    with pytest.raises(ValueError, match="<= 1"):
        check_propensity(np.array([0.5, 2.0, 0.2, 1.0]), 4)


def test_batch_inputs_one_class_row():
    s = np.vstack([S, S])
    y = np.vstack([Y, np.zeros(4)])
    with pytest.raises(ValueError, match="row 1"):
        check_batch_inputs(s, y)
    mask = np.array([[1, 1, 1, 1], [1, 0, 0, 1]], bool)  # row 1 keeps labels (0, 0)
    with pytest.raises(ValueError, match="one class"):
        check_batch_inputs(s, np.vstack([Y, Y]), mask=mask)


@pytest.mark.parametrize(
    ("key", "match"),
    [
        (None, "key is required"),
        ("abc", "JAX PRNG key .*got str 'abc'"),
        (0, "JAX PRNG key .*got int 0"),
        (1.5, "got float 1.5"),
        ([0, 1], "JAX PRNG key"),  # int64, not a legacy uint32 key
        (np.zeros(3, np.uint32), "got ndarray"),
        (jax.random.split(jax.random.key(0), 3), "single PRNG key.*shape \\(3,\\)"),
        (jax.numpy.zeros(2), "an array of shape \\(2,\\) and dtype float"),
        (object(), "got object"),
    ],
)
def test_check_key_refuses_everything_but_one_key(key, match):
    with pytest.raises(ValueError, match=match):
        check_key(key)


def test_check_key_accepts_typed_legacy_and_traced_keys():
    """A typed key and a legacy ``uint32[2]`` key (JAX or NumPy) come back as the same
    stream; inside ``jit`` the traced key passes (its shape and dtype are static)."""
    typed, legacy = jax.random.key(3), jax.random.PRNGKey(3)
    assert check_key(typed) is typed
    draw = jax.random.uniform(check_key(np.asarray(legacy)))
    assert float(draw) == float(jax.random.uniform(legacy))
    assert float(jax.jit(lambda k: jax.random.uniform(check_key(k)))(typed)) == float(
        jax.random.uniform(typed)
    )


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (["a", "b"], "scores must be numeric; got dtype <U1 \\(e.g. 'a'\\)"),
        (np.array([b"x"]), "must be numeric"),
        (np.array([1.0, None], dtype=object), "must be numeric"),
        ([[0.5, np.nan]], "non-finite"),
        (None, "required"),
    ],
)
def test_check_finite_array_names_the_input(value, match):
    with pytest.raises(ValueError, match=match):
        check_finite_array(value)
    np.testing.assert_array_equal(check_finite_array([[1, 2]], "x"), [[1.0, 2.0]])
