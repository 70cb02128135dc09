"""Damaged, edited and foreign files given to ``jaxcal.load``: each one raises a single
ValueError naming the file and what is wrong, before any large allocation, without
unpickling and without importing anything outside jaxcal."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import zipfile

import jax.numpy as jnp
import numpy as np
import pytest

import jaxcal
from jaxcal._pytree import pytree_dataclass
from jaxcal.calibrators.isotonic import FittedIsotonic

HEADER = "__jaxcal_header__"


def _good(tmp_path, name="iso.npz"):
    """A real fitted-calibrator file: FittedIsotonic built from its knots."""
    obj = FittedIsotonic(
        knots_x=jnp.asarray([0.0, 0.5, 1.0]),
        knots_y=jnp.asarray([0.1, 0.4, 0.9]),
        increasing=True,
        interpolation="linear",
    )
    path = tmp_path / name
    obj.save(path)
    return path


def _npy(arr, allow_pickle=False) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.asarray(arr), allow_pickle=allow_pickle)
    return buf.getvalue()


def _members(path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as zf:
        return {n[: -len(".npy")]: zf.read(n) for n in zf.namelist()}


def _header(members) -> dict:
    return json.loads(str(np.lib.format.read_array(io.BytesIO(members[HEADER]))))


def _rewrite(path, members=None, header=None, **arrays):
    """Write ``path`` again with some members replaced (raw bytes or arrays)."""
    members = dict(_members(path) if members is None else members)
    if header is not None:
        members[HEADER] = _npy(np.array(header if isinstance(header, str) else json.dumps(header)))
    for key, value in arrays.items():
        members[key] = value if isinstance(value, bytes) else _npy(value)
    with zipfile.ZipFile(path, "w") as zf:
        for key, data in members.items():
            zf.writestr(key + ".npy", data)
    return path


def _array_key(path, field):
    return _header(_members(path))["tree"]["fields"][field]["array"]


def _raises(path, message):
    return pytest.raises(ValueError, match=re.escape(str(path)) + ".*" + message)


# ---------------------------------------------------------------------------- archives
def test_good_file_loads(tmp_path):
    back = jaxcal.load(_good(tmp_path))
    assert isinstance(back, FittedIsotonic)
    np.testing.assert_array_equal(back.knots_y, [0.1, 0.4, 0.9])


def test_truncated_plain_npy_and_empty_files(tmp_path):
    data = _good(tmp_path).read_bytes()
    cases = {
        "half.npz": data[: len(data) // 2],
        "tail.npz": data[:-1],
        "plain.npz": _npy(np.arange(4.0)),
        "empty.npz": b"",
        "text.npz": b"not an archive\n",
    }
    for name, content in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        with _raises(path, "not a NumPy .npz archive"):
            jaxcal.load(path)


def test_flipped_data_byte_fails_the_checksum(tmp_path):
    path = _good(tmp_path)
    key = _array_key(path, "knots_y")
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(key + ".npy")
    data = bytearray(path.read_bytes())
    data[info.header_offset + 30 + len(info.filename) + info.file_size - 3] ^= 0x40
    path.write_bytes(bytes(data))
    with _raises(path, f"array '{key}' is damaged.*CRC"):
        jaxcal.load(path)


def test_huge_declared_array_is_rejected_before_allocating(tmp_path):
    path = _good(tmp_path)
    key = _array_key(path, "knots_x")
    fake = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        fake, {"descr": "<f8", "fortran_order": False, "shape": (2**40,)}
    )
    _rewrite(path, **{key: fake.getvalue() + bytes(24)})
    with _raises(path, r"declares shape \(1099511627776,\)"):
        jaxcal.load(path)


def test_header_of_a_huge_declared_string_is_rejected(tmp_path):
    path = _good(tmp_path)
    fake = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        fake, {"descr": "<U100000000", "fortran_order": False, "shape": ()}
    )
    _rewrite(path, **{HEADER: fake.getvalue() + b"{}"})
    with _raises(path, "declares shape"):
        jaxcal.load(path)


def test_pickled_and_foreign_members(tmp_path):
    path = _good(tmp_path)
    key = _array_key(path, "knots_x")
    _rewrite(path, **{key: _npy(np.array([0.0, {"x": 1}, 1.0], dtype=object), True)})
    with _raises(path, "Python objects"):
        jaxcal.load(path)
    path = _good(tmp_path, "extra.npz")
    with zipfile.ZipFile(path, "a") as zf:
        zf.writestr("notes.txt", "hello")
    with _raises(path, "'notes.txt' is not a .npy array"):
        jaxcal.load(path)
    path = _rewrite(_good(tmp_path, "unused.npz"), extra=np.zeros(3))
    with _raises(path, r"arrays \['extra'\] are not part of the saved object"):
        jaxcal.load(path)


# ---------------------------------------------------------------------------- header
@pytest.mark.parametrize(
    ("header", "message"),
    [
        ("{not json", "not valid JSON"),
        ('"just a string"', "must be a JSON object"),
        ("[1, 2]", "must be a JSON object"),
        ('{"format": "jaxcal-npz", "version": "1", "tree": {}}', "version must be a positive"),
        ('{"format": "jaxcal-npz", "version": true, "tree": {}}', "version must be a positive"),
        ('{"format": "jaxcal-npz", "version": 1.0, "tree": {}}', "version must be a positive"),
        ('{"format": "jaxcal-npz", "tree": {}}', "version must be a positive"),
        ('{"format": "jaxcal-npz", "version": 99, "tree": {}}', "newer jaxcal"),
        ('{"format": "other", "version": 1, "tree": {}}', "not a jaxcal file"),
        ('{"format": "jaxcal-npz", "version": 1}', "has no 'tree'"),
        ('{"format": "jaxcal-npz", "version": 1, "tree": []}', "node must be a JSON object"),
        ('{"format": "jaxcal-npz", "version": 1, "tree": {}}', "exactly one of the keys"),
        ('{"format": "jaxcal-npz", "version": 1, "tree": {"dict": 3}}', "'dict' must hold"),
        ('{"format": "jaxcal-npz", "version": 1, "tree": {"list": {}}}', "'list' must hold"),
        ('{"format": "jaxcal-npz", "version": 1, "tree": {"value": [1]}}', "JSON scalar"),
        ('{"format": "jaxcal-npz", "version": 1, "tree": {"float": "x"}}', "number as text"),
        ('{"format": "jaxcal-npz", "version": 1, "tree": {"array": "a9"}}', "file lacks"),
        ('{"format": "jaxcal-npz", "version": 1, "tree": {"object": 3}}', "class name"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"a": ' + "9" * 5000 + "}", "not valid JSON"),
    ],
)
def test_bad_headers(tmp_path, header, message):
    path = _rewrite(_good(tmp_path), header=header)
    with _raises(path, message):
        jaxcal.load(path)


def test_header_that_is_not_one_string(tmp_path):
    path = _rewrite(_good(tmp_path), **{HEADER: np.arange(3)})
    with _raises(path, "the header must be one string"):
        jaxcal.load(path)


def test_deep_tree_is_rejected(tmp_path):
    tree: dict = {"value": 1}
    for _ in range(200):
        tree = {"list": [tree]}
    header = {"format": "jaxcal-npz", "version": 1, "tree": tree}
    path = _rewrite(_good(tmp_path), header=header)
    with _raises(path, "nested deeper than 64 levels"):
        jaxcal.load(path)


def _edit_tree(path, edit):
    members = _members(path)
    header = _header(members)
    edit(header["tree"])
    return _rewrite(path, members, header=header)


def test_objects_with_unknown_or_missing_fields(tmp_path):
    path = _edit_tree(_good(tmp_path), lambda t: t["fields"].update(extra={"value": 1}))
    with _raises(path, r"FittedIsotonic has no fields \['extra'\]"):
        jaxcal.load(path)
    path = _edit_tree(_good(tmp_path, "b.npz"), lambda t: t["fields"].pop("knots_y"))
    with _raises(path, r"FittedIsotonic lacks the fields \['knots_y'\]"):
        jaxcal.load(path)
    path = _edit_tree(_good(tmp_path, "c.npz"), lambda t: t.pop("fields"))
    with _raises(path, "needs a 'fields' object"):
        jaxcal.load(path)


def test_field_of_the_wrong_kind(tmp_path):
    def text_for_array(tree):
        tree["fields"]["knots_x"] = {"value": "0.0, 0.5, 1.0"}

    path = _edit_tree(_good(tmp_path), text_for_array)
    with _raises(path, "FittedIsotonic.knots_x holds an array; the file gives the value"):
        jaxcal.load(path)

    def array_for_text(tree):
        tree["fields"]["interpolation"] = tree["fields"]["knots_x"]

    path = _edit_tree(_good(tmp_path, "b.npz"), array_for_text)
    with _raises(path, "FittedIsotonic.interpolation is a string"):
        jaxcal.load(path)


# ---------------------------------------------------------------------------- parameters
@pytest.mark.parametrize(
    ("value", "message"),
    [
        (np.array(["0.1", "0.4", "0.9"]), "dtype <U3 is not numeric"),
        (np.array([b"a", b"b", b"c"]), "is not numeric"),
        (np.array([0.1, np.nan, 0.9]), "holds 1 NaN or infinite values"),
        (np.array([0.1, 0.4, np.inf]), "holds 1 NaN or infinite values"),
        (np.array([0.1, 0.4]), r"has shape \(2,\); the header says \(3,\)"),
        (np.array([[0.1, 0.4, 0.9]]), r"has shape \(1, 3\)"),
        (np.array([1, 2, 3], np.int64), "has dtype int64; the header says"),
    ],
)
def test_edited_parameters(tmp_path, value, message):
    path = _good(tmp_path)
    key = _array_key(path, "knots_y")
    _rewrite(path, **{key: value})
    with _raises(path, f"array '{key}'.*{message}"):
        jaxcal.load(path)


def test_nan_saved_on_purpose_loads(tmp_path):
    """Arrays that held NaN when saved (e.g. the EM history of a click model after it
    stopped) load as they were."""
    obj = {"history": jnp.asarray([1.0, np.nan]), "n": np.int32(3)}
    jaxcal.save(obj, tmp_path / "h.npz")
    back = jaxcal.load(tmp_path / "h.npz")
    np.testing.assert_array_equal(back["history"], [1.0, np.nan])
    assert back["n"] == 3 and back["n"].dtype == np.int32


def test_text_arrays_outside_parameters_load(tmp_path):
    """NumPy text (a ``np.str_`` or an array of strings in a dict) is not a parameter and
    round-trips; in a JAX array or a field the class declares as an array it is rejected."""
    obj = {"name": np.str_("bpr"), "labels": np.array(["a", "bc"]), "x": jnp.ones(2)}
    jaxcal.save(obj, tmp_path / "t.npz")
    back = jaxcal.load(tmp_path / "t.npz")
    assert back["name"] == "bpr" and back["labels"].tolist() == ["a", "bc"]
    path = tmp_path / "t.npz"
    key = _header(_members(path))["tree"]["dict"]["x"]["array"]
    _rewrite(path, **{key: np.array(["1", "1"])})
    with _raises(path, f"array '{key}'.*dtype <U1 is not numeric"):
        jaxcal.load(path)


# ---------------------------------------------------------------------------- classes
def _set_class(path, name=None, module=None, drop_module=False):
    def edit(tree):
        if name is not None:
            tree["object"] = name
        if module is not None:
            tree["module"] = module
        if drop_module:
            tree.pop("module")

    return _edit_tree(path, edit)


def test_module_outside_jaxcal_is_never_imported(tmp_path):
    name = "jaxcal_test_module_that_must_not_be_imported"
    path = _set_class(_good(tmp_path), module=name)
    with _raises(path, f"from module '{name}'.*imports only jaxcal modules"):
        jaxcal.load(path)
    assert name not in sys.modules
    path = _set_class(_good(tmp_path, "b.npz"), module="os")
    with _raises(path, "the registered FittedIsotonic is from jaxcal.calibrators.isotonic"):
        jaxcal.load(path)
    path = _set_class(_good(tmp_path, "c.npz"), module="jaxcal.__main__")
    with _raises(path, "imports only jaxcal modules"):
        jaxcal.load(path)


def test_module_and_class_must_agree(tmp_path):
    path = _set_class(_good(tmp_path), module="jaxcal.calibrators.gaussian")
    with _raises(path, "module jaxcal.calibrators.gaussian defines no serializable class"):
        jaxcal.load(path)
    path = _set_class(_good(tmp_path, "b.npz"), module="jaxcal.no_such_module")
    with _raises(path, "this version of jaxcal has no module 'jaxcal.no_such_module'"):
        jaxcal.load(path)
    path = _set_class(_good(tmp_path, "c.npz"), name="FittedNothing")
    with _raises(path, "defines no serializable class 'FittedNothing'"):
        jaxcal.load(path)
    path = _set_class(_good(tmp_path, "d.npz"), module=7)
    with _raises(path, "module name must be a string"):
        jaxcal.load(path)


def test_failing_jaxcal_import_is_an_import_error(tmp_path, monkeypatch):
    """A jaxcal module that exists but cannot be imported (a missing dependency) is an
    ImportError saying so, not a silent "unknown class"."""
    import jaxcal._serialization as ser

    def fail(name, *args):
        raise ModuleNotFoundError("No module named 'some_dependency'", name="some_dependency")

    path = _set_class(_good(tmp_path), module="jaxcal.calibrators.not_yet_imported")
    monkeypatch.setattr(ser.importlib, "import_module", fail)
    with pytest.raises(ImportError, match="needs jaxcal.calibrators.not_yet_imported.*whose"):
        jaxcal.load(path)


def test_file_without_module_names_loads_in_a_fresh_process(tmp_path):
    """A file whose header does not name the modules of its classes (as written before
    it did) loads in a new interpreter: the loader imports jaxcal's Python modules, never
    its compiled kernels, to find the class."""
    path = _set_class(_good(tmp_path), drop_module=True)
    code = (
        "import sys, jaxcal\n"
        "obj = jaxcal.load(sys.argv[1])\n"
        "print(type(obj).__name__, [round(float(v), 6) for v in obj.knots_y])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["FittedIsotonic", "[0.1,", "0.4,", "0.9]"]


# ---------------------------------------------------------------------------- hooks
def test_check_loaded_hook(tmp_path):
    """A class's own ``_check_loaded`` runs on every object ``load`` rebuilds."""

    @pytree_dataclass
    class _Checked:
        lo: jnp.ndarray
        hi: jnp.ndarray

        def _check_loaded(self):
            if float(self.lo) > float(self.hi):
                raise ValueError("lo must not exceed hi")

    jaxcal.save(_Checked(lo=jnp.asarray(0.0), hi=jnp.asarray(1.0)), tmp_path / "ok.npz")
    assert float(jaxcal.load(tmp_path / "ok.npz").hi) == 1.0
    jaxcal.save(_Checked(lo=jnp.asarray(2.0), hi=jnp.asarray(1.0)), tmp_path / "bad.npz")
    with _raises(tmp_path / "bad.npz", "cannot rebuild .*_Checked: lo must not exceed hi"):
        jaxcal.load(tmp_path / "bad.npz")
