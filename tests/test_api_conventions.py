"""The conventions of docs/api.md, checked over every public name.

The public surface is the reference's (``docs/reference/_generate.py``): the ``__all__`` of
``jaxcal`` and of each public package, and the public methods of the classes among them.
"""

from __future__ import annotations

import importlib
import inspect
import pathlib
import sys
import typing

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "docs" / "reference"))
from _generate import PACKAGES, public_entries  # noqa: E402

# parameter name -> the convention's name (docs/api.md, "Names")
RENAMED = {
    "seed": "key",
    "random_state": "key",
    "rng": "key",
    "lr": "learning_rate",
    "n_iters": "max_iter or n_steps",
    "n_sweeps": "max_iter",
    "num_steps": "n_steps",
    "num_samples": "n_samples",
    "num_warmup": "n_warmup",
    "num_chains": "n_chains",
    "dim": "rank",
    "embedding_dim": "rank",
    "cv": "n_folds",
    "cross_folds": "n_folds",
    "epsilon": "eps (or a name saying what it is)",
    "rank_preserving": "centered",
}
# method name -> the convention's name
RENAMED_METHODS = {
    "score": "predict",
    "score_all": "predict_all",
    "logit": "predict_logit",
    "logits": "predict_logit",
    "apply": "predict",
    "fitted_cls": "fitted_class",
}


def _unique_entries():
    seen, out = set(), []
    for entry in public_entries():
        if entry.is_alias or id(entry.obj) in seen:
            continue
        seen.add(id(entry.obj))
        out.append(entry)
    return out


ENTRIES = _unique_entries()
JAXCAL_DIR = pathlib.Path(importlib.import_module("jaxcal").__file__).parent
CLASSES = [e for e in ENTRIES if e.kind == "class"]
CALLABLES = [e for e in ENTRIES if e.kind in ("class", "function")]


def _own_methods(cls):
    """Public methods a class defines or inherits from jaxcal (not from object / tuple)."""
    for name, value in inspect.getmembers(cls):
        if name.startswith("_") and name != "__init__":
            continue
        owner = next((k for k in cls.__mro__ if name in vars(k)), None)
        if owner is None or not owner.__module__.startswith("jaxcal"):
            continue
        if callable(value) or isinstance(value, property):
            yield name, value


def _signatures():
    """``(qualified name, signature)`` of every public function, class and method."""
    for entry in CALLABLES:
        items = [(entry.full_name, entry.obj)]
        if entry.kind == "class":
            items += [(f"{entry.full_name}.{n}", v) for n, v in _own_methods(entry.obj)]
        for name, obj in items:
            try:
                yield name, inspect.signature(obj)
            except (TypeError, ValueError):  # properties, builtins
                continue


SIGNATURES = list(_signatures())


def test_the_surface_is_walked():
    # a guard against an empty walk passing every check below
    assert len(CALLABLES) > 150 and len(SIGNATURES) > 500


def test_one_name_per_knob():
    bad = [
        f"{name}({p}): use {RENAMED[p]}"
        for name, sig in SIGNATURES
        for p in sig.parameters
        if p in RENAMED
    ]
    assert not bad, "\n".join(bad)


# randomness only on request (a random split, resampled bands, subsampled estimates):
# ``key=None``, and a ValueError naming ``key`` when the random output is asked for without one
OPTIONAL_KEY = {
    "jaxcal.data.split_ratings",
    "jaxcal.data.holdout_split",
    "jaxcal.data.calibration_pairs",
    "jaxcal.metrics.corp_reliability",
    "jaxcal.metrics.debiased_ece",
    "jaxcal.metrics.skce",
    "jaxcal.plot.corp_reliability_diagram",
    "jaxcal.sklearn.ScoreCalibrator",  # scikit-learn parameters have defaults
    "jaxcal.sklearn.ScoreCalibrator.__init__",
}


def test_keys_are_required_where_randomness_matters():
    """A ``key`` has no default (a result that depends on randomness names its key), except
    where randomness is only used on request, and then the default is ``None``."""
    bad = []
    for name, sig in SIGNATURES:
        key = sig.parameters.get("key")
        if key is None or key.default is inspect.Parameter.empty:
            continue
        if name not in OPTIONAL_KEY or key.default is not None:
            bad.append(f"{name}(key={key.default!r})")
    assert not bad, "optional key in: " + ", ".join(bad)


def test_one_name_per_method():
    bad = [
        f"{e.full_name}.{m}: use {RENAMED_METHODS[m]}"
        for e in CLASSES
        for m, _ in _own_methods(e.obj)
        if m in RENAMED_METHODS
    ]
    bad += [f"{e.full_name}.fitted_cls" for e in CLASSES if hasattr(e.obj, "fitted_cls")]
    assert not bad, "\n".join(bad)


def _exported_classes() -> set[int]:
    return {id(e.obj) for e in public_entries() if e.kind == "class"}


def test_every_fitted_type_is_exported():
    """Every ``Fitted*`` class defined in jaxcal is a public name of some package."""
    exported = _exported_classes()
    missing = []
    for package in PACKAGES:
        root = importlib.import_module(package)
        base = pathlib.Path(root.__file__).parent
        if not root.__file__.endswith("__init__.py"):
            continue
        for path in base.rglob("*.py"):
            parts = path.relative_to(JAXCAL_DIR).with_suffix("").parts
            module_name = ".".join(("jaxcal", *parts)).removesuffix(".__init__")
            if ".reproduce" in module_name or ".cli" in module_name:
                continue
            module = importlib.import_module(module_name)
            for name, obj in vars(module).items():
                if (
                    name.startswith("Fitted")
                    and inspect.isclass(obj)
                    and obj.__module__ == module_name
                    and id(obj) not in exported
                ):
                    missing.append(f"{module_name}.{name}")
    assert not sorted(set(missing)), "not exported: " + ", ".join(sorted(set(missing)))


def _fit_methods():
    for entry in CLASSES:
        fit = vars(entry.obj).get("fit") or getattr(entry.obj, "fit", None)
        if fit is not None and callable(fit) and entry.obj.__module__.startswith("jaxcal"):
            yield entry, fit


@pytest.mark.parametrize(
    "entry,fit", list(_fit_methods()), ids=lambda x: getattr(x, "full_name", "")
)
def test_fit_is_annotated_with_an_exported_type(entry, fit):
    """``fit`` names what it returns, and that type is public."""
    module = sys.modules[inspect.unwrap(fit).__module__]
    hints = typing.get_type_hints(fit, globalns=vars(module))
    returned = hints.get("return")
    assert returned is not None and returned is not typing.Any, f"{entry.full_name}.fit -> Any"
    origin = typing.get_origin(returned)
    types_ = typing.get_args(returned) if origin is typing.Union else (returned,)
    exported = _exported_classes()
    for t in types_:
        if inspect.isclass(t) and t.__module__.startswith("jaxcal"):
            assert id(t) in exported, f"{entry.full_name}.fit returns {t.__name__}, not public"


def test_every_public_callable_has_its_own_example():
    """A function's or class's own docstring carries a runnable example (``>>>``)."""
    bad = [
        e.full_name
        for e in CALLABLES
        if ">>>" not in (e.obj.__doc__ or "")
        and not (inspect.isclass(e.obj) and issubclass(e.obj, BaseException))  # warnings
    ]
    assert not bad, f"{len(bad)} without an example: " + ", ".join(bad)
