"""Invalid inputs (NaN / inf scores, labels not 0/1, length mismatch, empty input, one
class, negative weights, propensities outside (0, 1]) raise a clear ValueError."""

from __future__ import annotations

import numpy as np
import pytest

from jaxcal._validation import check_batch_inputs, check_fit_inputs, check_propensity

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
