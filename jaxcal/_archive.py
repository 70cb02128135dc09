"""Read-only access to a saved ``.npz`` file for :func:`jaxcal.load`: every member is read
only after its ``.npy`` header has been checked against the size stored in the zip
directory, so a damaged file raises a ``ValueError`` naming it instead of allocating memory
the file does not hold."""

from __future__ import annotations

import math
import zipfile
import zlib

import numpy as np

__all__ = ["NpzArchive", "NUMERIC_KINDS"]

NUMERIC_KINDS = "biufc"  # dtype kinds of parameter arrays


class NpzArchive:
    """Read-only view of a ``.npz`` archive whose members are read only after their
    ``.npy`` headers are checked against the sizes stored in the zip directory."""

    def __init__(self, path: str):
        self.path = path
        try:
            self._zip = zipfile.ZipFile(path)
        except OSError as exc:  # permissions, a directory, an I/O error
            raise ValueError(f"cannot read {path}: {exc}") from None
        except (zipfile.BadZipFile, zlib.error, EOFError, ValueError) as exc:
            raise ValueError(
                f"{path} is not a NumPy .npz archive, or a damaged one (truncated or "
                f"overwritten): {exc}"
            ) from None
        self.members: dict[str, zipfile.ZipInfo] = {}
        for info in self._zip.infolist():
            if not info.filename.endswith(".npy") or info.is_dir():
                self.close()
                raise ValueError(
                    f"{path}: archive member {info.filename!r} is not a .npy array; a .npz "
                    "file holds .npy arrays only."
                )
            self.members[info.filename[: -len(".npy")]] = info

    def __enter__(self) -> NpzArchive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._zip.close()

    def _header(self, key: str, fp) -> tuple[tuple[int, ...], bool, np.dtype]:
        fmt = np.lib.format
        version = fmt.read_magic(fp)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(fp)
        elif version == (2, 0):
            shape, fortran, dtype = fmt.read_array_header_2_0(fp)
        else:
            raise ValueError(f".npy format version {version} is not supported")
        return shape, fortran, dtype

    def read(self, key: str, *, kinds: str = NUMERIC_KINDS) -> np.ndarray:
        """The array stored under ``key``; ``ValueError`` (naming the file and the array) on
        any damage, a pickled (object) array, or a dtype whose kind is not in ``kinds``."""
        info = self.members[key]
        where = f"{self.path}: array {key!r}"
        try:
            if info.compress_type == zipfile.ZIP_STORED and info.compress_size != info.file_size:
                raise ValueError(
                    f"the zip directory gives {info.file_size} bytes but {info.compress_size} "
                    "are stored"
                )
            with self._zip.open(info) as fp:
                shape, _, dtype = self._header(key, fp)
                if dtype.hasobject:
                    raise ValueError(
                        "it holds Python objects (pickled data), which jaxcal never loads"
                    )
                if dtype.kind not in kinds:
                    what = "numeric" if set(kinds) <= set(NUMERIC_KINDS) else "numeric or text"
                    raise ValueError(f"dtype {dtype} is not {what}")
                if any(d < 0 for d in shape):
                    raise ValueError(f"its header declares the shape {shape}")
                declared = math.prod(shape) * dtype.itemsize
                stored = info.file_size - fp.tell()
                if declared != stored:
                    raise ValueError(
                        f"its header declares shape {shape} of {dtype} ({declared} bytes) but "
                        f"the archive holds {stored} bytes of data"
                    )
            with self._zip.open(info) as fp:  # sizes agree: read it (numpy checks the CRC)
                arr = np.lib.format.read_array(fp, allow_pickle=False)
                if fp.read(1):
                    raise ValueError("data continue past the declared shape")
        except (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError) as exc:
            raise ValueError(f"{where} is damaged or not a valid .npy array: {exc}") from None
        return arr
