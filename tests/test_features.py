"""Feature tables: reading (dict, structured array, DataFrame-like), categorical codes,
quantile bins, reserved codes for missing / unseen values, errors, save / load."""

import jax
import numpy as np
import pytest

import jaxcal
from jaxcal._features import FeatureEncoder, encode_features, feature_columns


class FrameLike:
    """The least a DataFrame offers: ``.columns`` and ``frame[column]``."""

    def __init__(self, data):
        self._data = dict(data)
        self.columns = list(self._data)

    def __getitem__(self, key):
        return self._data[key]


def _table(n=200, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "country": rng.choice(["fr", "de", "us", "jp"], n),
        "device": rng.integers(0, 3, n),
        "age": rng.normal(40, 10, n),
        "member": rng.random(n) < 0.3,
    }


def test_three_table_kinds_give_the_same_codes():
    t = _table()
    structured = np.zeros(200, [(k, v.dtype) for k, v in t.items()])
    for k, v in t.items():
        structured[k] = v
    a, enc = encode_features(t)
    b, _ = encode_features(structured)
    c, _ = encode_features(FrameLike(t))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)
    assert a.dtype == np.int32 and a.shape == (200, 4)
    assert enc.kinds == ("categorical", "categorical", "numeric", "categorical")


def test_categorical_codes_are_ranks_of_sorted_levels():
    t = _table()
    codes, enc = encode_features(t)
    assert enc.categories[0] == ("de", "fr", "jp", "us")
    # oracle: position in the sorted list of distinct values
    np.testing.assert_array_equal(
        codes[:, 0], [sorted(set(t["country"])).index(v) for v in t["country"]]
    )
    np.testing.assert_array_equal(codes[:, 1], t["device"])
    np.testing.assert_array_equal(codes[:, 3], t["member"].astype(int))
    assert enc.n_levels == (5, 4, enc.n_levels[2], 3)


def test_numeric_bins_are_right_closed_quantile_bins():
    rng = np.random.default_rng(1)
    x = rng.normal(size=1001)
    codes, enc = encode_features({"x": x}, n_bins=4)
    q = np.quantile(x, [0.25, 0.5, 0.75])
    np.testing.assert_allclose(enc.edges[0], q, rtol=0, atol=0)
    # oracle: count of edges strictly below the value (bins (e_{j-1}, e_j])
    np.testing.assert_array_equal(codes[:, 0], [(q < v).sum() for v in x])
    assert np.bincount(codes[:, 0]).tolist() == [251, 250, 250, 250]
    assert enc.n_levels == (5,)


def test_few_distinct_numeric_values_get_one_bin_each():
    x = np.array([0.5, 2.0, 0.5, 7.0, 2.0])
    codes, enc = encode_features({"x": x}, n_bins=16)
    assert codes[:, 0].tolist() == [0, 1, 0, 2, 1]
    assert enc.n_levels == (4,)
    # new values fall in right-closed intervals; outside the range: the end bins
    new = enc.transform({"x": np.array([-3.0, 0.5, 0.6, 2.0, 100.0])})
    assert new[:, 0].tolist() == [0, 0, 1, 1, 2]


def test_unseen_categories_and_missing_values_get_the_reserved_code():
    codes, enc = encode_features(
        {
            "s": np.array(["b", None, "a"], dtype=object),
            "f": np.array([1.0, np.nan, 3.0]),
            "i": np.array([5, 7, 5]),
        }
    )
    assert enc.kinds == ("categorical", "numeric", "categorical")
    assert codes.tolist() == [[1, 0, 0], [2, 2, 1], [0, 1, 0]]
    new = enc.transform(
        {
            "s": ["a", "zz", "b"],
            "f": [np.nan, 2.0, 9.0],
            "i": np.array([7, 6, 5]),
            "extra": [1, 2, 3],
        }
    )
    assert new.tolist() == [[0, 2, 1], [2, 1, 2], [1, 1, 0]]


@pytest.mark.parametrize(
    ("fit_values", "new_values"),
    [
        (np.array([3, -2, 7, 3, 40]), np.array([7, -2, 5, 41, -3, 3, 40])),  # a few ints
        (np.array([0, 10**6, 5]), np.array([5, 10**6, 6, 0])),  # sparse: searched
        (np.array([True, False, True]), np.array([False, True])),
        (np.array([2, 4], np.int8), np.array([4, 3, 2, -128], np.int8)),
        (np.array([1, 9], np.uint16), np.array([9, 65535, 1], np.uint16)),
        (np.array([1, 9]), np.array([9, 2**64 - 1, 1], np.uint64)),  # beyond int64
    ],
)
def test_integer_categories_code_by_sorted_rank(fit_values, new_values):
    """Integer and bool categories get their rank among the sorted levels, unseen ones the
    reserved code, whatever the integer type (oracle: a Python dictionary)."""
    codes, enc = encode_features({"c": fit_values})
    levels = sorted({v.item() for v in fit_values})
    rank = {v: k for k, v in enumerate(levels)}
    assert codes[:, 0].tolist() == [rank[v.item()] for v in fit_values]
    new = enc.transform({"c": new_values})[:, 0]
    assert new.tolist() == [rank.get(v.item(), len(levels)) for v in new_values]


def test_forced_kinds_and_float_categorical_with_nan():
    t = {"f": np.array([2.0, np.nan, 1.0, 2.0]), "i": np.array([1, 2, 3, 4])}
    codes, enc = encode_features(t, categorical=["f"], numeric="i", n_bins=2)
    assert enc.kinds == ("categorical", "numeric")
    assert enc.categories[0] == (1.0, 2.0)
    assert codes[:, 0].tolist() == [1, 2, 0, 1]
    assert codes[:, 1].tolist() == [0, 0, 1, 1]


def test_level_labels_name_categories_bins_and_missing():
    _, enc = encode_features({"c": ["x", "y", "x"], "v": np.array([1.0, 2.0, 3.0])}, n_bins=16)
    assert [enc.level_label(0, k) for k in range(3)] == ["x", "y", "other/missing"]
    assert [enc.level_label(1, k) for k in range(4)] == ["<= 1", "(1, 2]", "> 2", "missing"]


def test_encoder_is_a_pytree_and_saves_without_pickle(tmp_path):
    t = _table()
    codes, enc = encode_features(t, n_bins=5)
    leaves, treedef = jax.tree_util.tree_flatten(enc)
    assert isinstance(jax.tree_util.tree_unflatten(treedef, leaves), FeatureEncoder)
    enc.save(tmp_path / "enc.npz")
    loaded = jaxcal.load(tmp_path / "enc.npz")
    assert loaded.names == enc.names and loaded.categories == enc.categories
    np.testing.assert_array_equal(loaded.transform(t), codes)


def test_feature_columns_reads_in_order_and_checks_length():
    cols = feature_columns({"b": [1, 2], "a": np.array([b"x", b"y"])}, n=2)
    assert list(cols) == ["b", "a"]
    assert cols["a"].dtype.kind == "U"
    with pytest.raises(ValueError, match="'b' has 2 rows but the scores have 3"):
        feature_columns({"b": [1, 2]}, n=3)


@pytest.mark.parametrize(
    ("table", "match"),
    [
        ({}, "no columns"),
        ({"a": [1, 2], "b": [1, 2, 3]}, "column 'b' has 3 rows but column 'a' has 2"),
        ({"a": np.zeros((2, 2))}, "column 'a' must be 1-D"),
        ({1: [1, 2]}, "names must be strings"),
        ({"a": np.array([1.0, np.inf])}, "infinite"),
        ({"a": np.array([1 + 1j])}, "dtype complex"),
        ({"a": np.array(["2020-01-01"], dtype="datetime64[D]")}, "dates"),
        ([[1, 2]], "table of columns"),
        ({"a": np.zeros(0)}, "no rows"),
    ],
)
def test_bad_tables_raise_naming_the_problem(table, match):
    with pytest.raises(ValueError, match=match):
        encode_features(table, name="features")


def test_bad_options_raise():
    t = {"a": [1.0, 2.0], "s": ["x", "y"]}
    with pytest.raises(ValueError, match=r"categorical= names \['zz'\]"):
        encode_features(t, categorical=["zz"])
    with pytest.raises(ValueError, match="named numeric but holds dtype"):
        encode_features(t, numeric=["s"])
    with pytest.raises(ValueError, match="both categorical and numeric"):
        encode_features(t, numeric=["a"], categorical=["a"])
    with pytest.raises(ValueError, match="n_bins"):
        encode_features(t, n_bins=0)
    _, enc = encode_features(t)
    with pytest.raises(ValueError, match=r"lacks the column\(s\) \['s'\]"):
        enc.transform({"a": [1.0]})
    with pytest.raises(ValueError, match="was numeric"):
        enc.transform({"a": ["u"], "s": ["x"]})
