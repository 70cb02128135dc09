r"""scikit-learn adapter: any jaxcal calibrator as a scikit-learn classifier of scores.

:class:`ScoreCalibrator` wraps a calibrator (``jaxcal.PlattScaling()``,
``jaxcal.IsotonicCalibration(centered=True)``, ...) in the estimator API, so it works
where scikit-learn expects a binary classifier: as the last step of a ``Pipeline`` whose
earlier steps produce one column of scores, in ``cross_val_predict(...,
method="predict_proba")``, and in ``GridSearchCV`` over the calibrator's hyperparameters
(``calibrator__<field>``). The input ``X`` is the score itself: shape ``(n,)`` or
``(n, 1)``; for a calibrator that also takes a feature table
(``jaxcal.MulticalibrationBoosting``), ``X``'s first column is the score and the others
are numeric features ``x1, x2, ...``. Fitting calls ``calibrator.fit(scores, labels,
sample_weight=..., propensity=..., loss=...)`` (with the feature table after the labels);
the fitted jaxcal map is ``calibrator_``.

jaxcal calibrators are frozen dataclasses (immutable values), so they have no
``set_params`` of their own: :meth:`ScoreCalibrator.get_params` lists their fields as
``calibrator__<field>`` and :meth:`ScoreCalibrator.set_params` replaces the calibrator by a
copy with the new values (``dataclasses.replace``), which is what ``clone`` and
``GridSearchCV`` need.

scikit-learn is not a dependency of jaxcal: install it with ``pip install "jaxcal[sklearn]"``
(``import jaxcal`` never imports it; ``import jaxcal.sklearn`` does).

Example:
    >>> import numpy as np, jaxcal
    >>> from jaxcal.sklearn import ScoreCalibrator
    >>> rng = np.random.default_rng(0)
    >>> s = rng.normal(size=500)
    >>> y = (rng.uniform(size=500) < 1 / (1 + np.exp(-2 * s))).astype(int)
    >>> clf = ScoreCalibrator(jaxcal.PlattScaling()).fit(s, y)
    >>> clf.predict_proba(np.array([-1.0, 0.0, 1.0])).round(2)
    array([[0.92, 0.08],
           [0.52, 0.48],
           [0.09, 0.91]])
    >>> clf = ScoreCalibrator(jaxcal.IsotonicCalibration())
    >>> clf.set_params(calibrator__centered=True).calibrator
    IsotonicCalibration(increasing=True, interpolation='linear', centered=True, trim=0.0,
                        out_of_bounds='clip', y_min=None, y_max=None)
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import numpy as np

from jaxcal.calibrators.platt import PlattScaling

try:
    from sklearn.base import BaseEstimator, ClassifierMixin
    from sklearn.utils.multiclass import check_classification_targets
    from sklearn.utils.validation import check_is_fitted, column_or_1d
except ImportError as err:  # pragma: no cover - exercised with scikit-learn hidden
    raise ImportError(
        "jaxcal.sklearn needs scikit-learn, which jaxcal does not install by default: "
        'pip install "jaxcal[sklearn]"'
    ) from err

try:  # scikit-learn >= 1.6
    from sklearn.utils.validation import validate_data as _validate_data
except ImportError:  # pragma: no cover - scikit-learn 1.3 to 1.5

    def _validate_data(estimator, *args, **kwargs):
        return estimator._validate_data(*args, **kwargs)


__all__ = ["ScoreCalibrator"]

_PREFIX = "calibrator__"


def _default_calibrator():
    return PlattScaling()


def _hyperparameters(calibrator: Any) -> dict[str, Any]:
    """The init fields of a dataclass calibrator (its hyperparameters), else nothing."""
    if not dataclasses.is_dataclass(calibrator) or isinstance(calibrator, type):
        return {}
    return {f.name: getattr(calibrator, f.name) for f in dataclasses.fields(calibrator) if f.init}


class ScoreCalibrator(ClassifierMixin, BaseEstimator):
    """A jaxcal calibrator as a scikit-learn binary classifier whose one feature is a score.

    Args:
        calibrator: an unfitted jaxcal calibrator (default ``None``: ``jaxcal.PlattScaling()``).
        loss: the loss weighting passed to ``calibrator.fit`` (``"naive"``, ``"ips"``,
            ``"ips_positive"`` or ``"snips"``; all but ``"naive"`` need ``propensity`` in
            :meth:`fit`).
        key: a JAX PRNG key for a calibrator whose fit is random (``NeuralCalibration``
            initialises its network from it); required by those, unused by the others.

    Attributes:
        calibrator_: the fitted jaxcal calibrator (an immutable pytree with ``predict``).
        classes_: the two class labels; the second is the positive class (label 1 of the
            calibrator).
        n_features_in_: 1.

    Example:
        >>> import numpy as np, jaxcal
        >>> from jaxcal.sklearn import ScoreCalibrator
        >>> s = np.array([-2.0, -1.0, 0.5, 1.0, 2.0, -0.5])
        >>> y = np.array(["no", "no", "yes", "yes", "yes", "no"])
        >>> clf = ScoreCalibrator(jaxcal.IsotonicCalibration()).fit(s, y)
        >>> clf.predict(np.array([-1.5, 1.5]))
        array(['no', 'yes'], dtype='<U3')
    """

    def __init__(self, calibrator: Any = None, loss: str = "naive", key: Any = None):
        self.calibrator = calibrator
        self.loss = loss
        self.key = key

    def _calibrator(self) -> Any:
        return _default_calibrator() if self.calibrator is None else self.calibrator

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """This estimator's parameters; with ``deep=True`` also the calibrator's
        hyperparameters as ``calibrator__<field>``."""
        params = super().get_params(deep=False)
        if deep:
            fields = _hyperparameters(self._calibrator())
            params.update({_PREFIX + k: v for k, v in fields.items()})
        return params

    def set_params(self, **params: Any) -> ScoreCalibrator:
        """Set parameters; ``calibrator__<field>=value`` replaces the (immutable)
        calibrator by a copy with that field changed.

        Raises:
            ValueError: an unknown parameter or calibrator field.
        """
        nested = {k[len(_PREFIX) :]: v for k, v in params.items() if k.startswith(_PREFIX)}
        own = {k: v for k, v in params.items() if not k.startswith(_PREFIX)}
        if own:
            super().set_params(**own)
        if nested:
            calibrator = self._calibrator()
            fields = _hyperparameters(calibrator)
            unknown = sorted(set(nested) - set(fields))
            if unknown:
                raise ValueError(
                    f"Invalid parameter {unknown[0]!r} for calibrator {calibrator!r}. "
                    f"Valid parameters are: {sorted(fields)!r}."
                )
            self.calibrator = dataclasses.replace(calibrator, **nested)
        return self

    def _scores(self, X: Any, *, reset: bool) -> np.ndarray:
        """``X`` as a float64 column of scores (sklearn's input checks), flattened: its first
        column for a calibrator that takes a feature table (``takes_features``)."""
        if getattr(X, "ndim", None) is None:  # a list, or an object with __array__
            X = np.asarray(X)
        if X.ndim == 1:
            X = np.reshape(np.asarray(X), (-1, 1))
        X = _validate_data(self, X, reset=reset, dtype=np.float64)
        if X.shape[1] != 1 and not getattr(self._calibrator(), "takes_features", False):
            raise ValueError(
                f"X has {X.shape[1]} features, but {type(self).__name__} is expecting 1 "
                "feature as input: a calibrator maps one column of scores, shape (n,) or "
                "(n, 1), to probabilities (put the model that scores your features before "
                "it, e.g. in a Pipeline)."
            )
        return X[:, 0]

    def _table(self, X: Any) -> tuple:
        """``()``, or ``(features,)`` for a calibrator that takes a feature table: the columns
        of ``X`` (checked by :meth:`_scores`) after the first, named ``x1, x2, ...``."""
        if not getattr(self._calibrator(), "takes_features", False) or np.ndim(X) < 2:
            return ()
        X = np.asarray(X, np.float64)
        return ({f"x{j}": X[:, j] for j in range(1, X.shape[1])},) if X.shape[1] > 1 else ()

    def fit(
        self, X: Any, y: Any, sample_weight: Any = None, propensity: Any = None
    ) -> ScoreCalibrator:
        """Fit the calibrator on scores ``X`` and binary labels ``y`` (any two values).

        Args:
            X: ``(n,)`` or ``(n, 1)`` scores.
            y: ``(n,)`` labels of two classes.
            sample_weight: optional ``(n,)`` non-negative weights.
            propensity: optional ``(n,)`` propensities in (0, 1] (for ``loss`` other than
                ``"naive"``).

        Returns:
            self.

        Raises:
            ValueError: more than one column of scores, labels of more or fewer than two
                classes, or anything the calibrator's ``fit`` rejects.
        """
        if y is None:
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target y is None."
            )
        y = column_or_1d(y, warn=True)
        if y.dtype.kind in "fc" and not np.isfinite(y).all():
            raise ValueError(
                f"Input y contains {'NaN' if np.isnan(y).any() else 'infinity'}: labels must "
                "be two classes."
            )
        check_classification_targets(y)
        classes, labels = np.unique(y, return_inverse=True)
        if classes.size > 2:
            raise ValueError(
                f"Only binary classification is supported: y holds {classes.size} classes; "
                f"{type(self).__name__} calibrates the scores of one binary label."
            )
        if classes.size == 1:
            raise ValueError(
                f"y holds only one class ({classes[0]!r}); a calibration map needs both."
            )
        scores = self._scores(X, reset=True)
        if labels.shape[0] != scores.shape[0]:
            raise ValueError(
                f"length mismatch: {scores.shape[0]} scores but {labels.shape[0]} labels."
            )
        calibrator = self._calibrator()
        keyed = {}
        if "key" in inspect.signature(calibrator.fit).parameters:  # a random fit
            if self.key is None:
                raise ValueError(
                    f"{type(calibrator).__name__}'s fit is random: pass "
                    f"{type(self).__name__}(..., key=jax.random.key(0)) (a JAX PRNG key)."
                )
            keyed = {"key": self.key}
        self.classes_ = classes
        self.calibrator_ = calibrator.fit(
            scores,
            labels,
            *self._table(X),
            sample_weight=sample_weight,
            propensity=propensity,
            loss=self.loss,
            **keyed,
        )
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        """``(n, 2)`` float64 probabilities of ``classes_``: ``[1 - p, p]``."""
        check_is_fitted(self, "calibrator_")
        scores = self._scores(X, reset=False)
        p = np.asarray(self.calibrator_.predict(scores, *self._table(X)), np.float64)
        return np.stack([1.0 - p, p], axis=1)

    def predict(self, X: Any) -> np.ndarray:
        """The class of each score: ``classes_[1]`` where its probability exceeds 1/2."""
        p = self.predict_proba(X)[:, 1]
        return self.classes_[(p > 0.5).astype(np.intp)]

    def __sklearn_tags__(self):  # scikit-learn >= 1.6
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        return tags

    def _more_tags(self) -> dict[str, Any]:  # scikit-learn < 1.6
        return {"binary_only": True}
