"""``MemmapFeatureStore``: node features on disk, read by row, through PyG's protocol.

A PyG ``FeatureStore`` whose columns are ``.npy`` files in one directory, opened
as memory maps: ``get_tensor(TensorAttr(group, attr, index))`` reads the rows
``index`` only (the pages holding them), so the fixed-size loaders, given
``(MemmapFeatureStore(path), graph_store)``, hold a batch's rows and never the
whole feature matrix (``benchmarks/bench_feature_store.py`` measures it). What
the directory holds is described by ``metadata.json`` (JSON, never pickle):
one entry a column, its group (``None``, a node type, or an edge type as a
list), its name, file, dtype and shape, checked against the file when opened.

The store pickles as its directory (worker processes reopen the files, they
get no copy of the data). ``put_tensor`` writes a whole column;
:meth:`MemmapFeatureStore.create_tensor` makes an empty one to fill chunk by
chunk (a column larger than memory).
"""
from __future__ import annotations

import json
import os
import threading
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import FeatureStore, TensorAttr

__all__ = ["MemmapFeatureStore", "MemmapStoreError", "METADATA_FILE"]

#: the directory's description of its columns
METADATA_FILE = "metadata.json"
_FORMAT = "graph_adapter.memmap_feature_store"
_VERSION = 1

Key = Tuple[Any, str]


class MemmapStoreError(ValueError):
    """A memmap store directory whose metadata is missing, malformed or disagrees with
    its files, or a request the store cannot serve (an unknown column, a partial put)."""


def _group_to_json(group: Any) -> Any:
    return list(group) if isinstance(group, tuple) else group


def _group_from_json(group: Any) -> Any:
    return tuple(group) if isinstance(group, list) else group


class MemmapFeatureStore(FeatureStore):
    """A PyG ``FeatureStore`` of ``.npy`` memory maps in ``directory``.

    Args:
        directory: the store's folder (made if absent); an existing store's
            ``metadata.json`` is read and each column checked against its file.

    Raises:
        MemmapStoreError: metadata that is not this store's JSON, or a column whose
            file is missing or has another dtype or shape than the metadata says.

    Example:
        ```python
        import tempfile

        import torch
        from torch_geometric.data import TensorAttr

        from graph_adapter.sampling.inputs.stores import MemmapFeatureStore

        store = MemmapFeatureStore(tempfile.mkdtemp())
        store.put_tensor(torch.randn(1000, 16), group_name=None, attr_name="x", index=None)
        rows = store.get_tensor(TensorAttr(None, "x", torch.tensor([3, 1, 4])))
        assert rows.shape == (3, 16)
        ```
    """

    def __init__(self, directory: str):
        super().__init__()
        self.directory = os.fspath(directory)
        os.makedirs(self.directory, exist_ok=True)
        self._columns: Dict[Key, Dict[str, Any]] = {}
        self._open: Dict[Key, np.ndarray] = {}
        self._lock = threading.Lock()
        path = os.path.join(self.directory, METADATA_FILE)
        if os.path.exists(path):
            self._read_metadata(path)

    # -- metadata ------------------------------------------------------------
    def _read_metadata(self, path: str) -> None:
        try:
            with open(path) as f:
                meta = json.load(f)
        except (OSError, ValueError) as e:
            raise MemmapStoreError(f"{path}: not readable JSON ({e}); a MemmapFeatureStore "
                                   f"directory holds its own metadata.json") from None
        if not isinstance(meta, dict) or meta.get("format") != _FORMAT \
                or not isinstance(meta.get("columns"), list):
            raise MemmapStoreError(f"{path}: not a MemmapFeatureStore's metadata (expected "
                                   f"{{'format': {_FORMAT!r}, 'version': {_VERSION}, "
                                   f"'columns': [...]}})")
        if meta.get("version") != _VERSION:
            raise MemmapStoreError(f"{path}: version {meta.get('version')!r}; this release "
                                   f"reads version {_VERSION}")
        for c in meta["columns"]:
            need = {"group": (str, list, type(None)), "attr": str, "file": str, "dtype": str,
                    "shape": list}
            bad = [k for k, t in need.items() if not isinstance(c.get(k, ...), t)]
            if not isinstance(c, dict) or bad:
                raise MemmapStoreError(f"{path}: a column entry {c!r:.120} lacks or mistypes "
                                       f"{bad}; each has group, attr, file, dtype, shape")
            if os.path.basename(c["file"]) != c["file"]:
                raise MemmapStoreError(f"{path}: column file {c['file']!r} is not a file name "
                                       f"inside the store's directory")
            self._columns[(_group_from_json(c["group"]), c["attr"])] = c

    def _write_metadata(self) -> None:
        cols = [dict(c, group=_group_to_json(g)) for (g, _), c in self._columns.items()]
        path = os.path.join(self.directory, METADATA_FILE)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"format": _FORMAT, "version": _VERSION, "columns": cols}, f, indent=1)
        os.replace(tmp, path)  # a reader never sees half a file

    def _array(self, key: Key) -> np.ndarray:
        """The column's memory map, opened on first use and checked against the metadata."""
        arr = self._open.get(key)
        if arr is not None:
            return arr
        with self._lock:
            if key not in self._open:
                c = self._column(key)
                path = os.path.join(self.directory, c["file"])
                if not os.path.exists(path):
                    raise MemmapStoreError(f"column {key!r}: its file {path} is missing")
                # "c": copy-on-write: the loader's tensors are writable, the file is never changed
                arr = np.load(path, mmap_mode="c", allow_pickle=False)
                if str(arr.dtype) != c["dtype"] or list(arr.shape) != list(c["shape"]):
                    raise MemmapStoreError(
                        f"column {key!r}: {path} holds {arr.dtype} {list(arr.shape)}; the "
                        f"metadata says {c['dtype']} {c['shape']}")
                self._open[key] = arr
        return self._open[key]

    def _column(self, key: Key) -> Dict[str, Any]:
        c = self._columns.get(key)
        if c is None:
            raise KeyError(f"MemmapFeatureStore({self.directory!r}) has no column "
                           f"(group_name={key[0]!r}, attr_name={key[1]!r}); it has "
                           f"{sorted(map(str, self._columns))}")
        return c

    # -- writing -------------------------------------------------------------
    def create_tensor(self, group_name: Any, attr_name: str, shape: Tuple[int, ...],
                      dtype: Any = np.float32) -> np.ndarray:
        """A new zero column of ``shape``, as a writable memory map to fill chunk by chunk
        (``arr[i:j] = ...``; ``arr.flush()`` when done): a column larger than memory."""
        key = (group_name, attr_name)
        with self._lock:
            self._open.pop(key, None)
            used = {c["file"] for c in self._columns.values()}
            old = self._columns.get(key)
            i = 0
            while f"col{i}.npy" in used and not (old and old["file"] == f"col{i}.npy"):
                i += 1
            name = f"col{i}.npy"  # a name of ours: a column's name may hold any character
            path = os.path.join(self.directory, name)
            arr = np.lib.format.open_memmap(path, mode="w+", dtype=np.dtype(dtype),
                                            shape=tuple(int(s) for s in shape))
            self._columns[key] = {"group": group_name, "attr": attr_name, "file": name,
                                  "dtype": str(arr.dtype), "shape": list(arr.shape)}
            self._write_metadata()
        return arr

    def _put_tensor(self, tensor: Any, attr: TensorAttr) -> bool:
        index = attr.index
        n = int(tensor.shape[0])
        if index is not None and not (isinstance(index, slice) and index == slice(None)) and \
                not torch.equal(torch.as_tensor(index).view(-1).long(), torch.arange(n)):
            raise MemmapStoreError(f"put_tensor of ({attr.group_name!r}, {attr.attr_name!r}) "
                                   f"with an index: this store writes whole columns "
                                   f"(index=None); create_tensor then arr[rows] = ... "
                                   f"writes part of one")
        value = tensor.detach().cpu().numpy() if isinstance(tensor, Tensor) else np.asarray(tensor)
        arr = self.create_tensor(attr.group_name, attr.attr_name, value.shape, value.dtype)
        arr[:] = value
        arr.flush()
        return True

    def _remove_tensor(self, attr: TensorAttr) -> bool:
        key = (attr.group_name, attr.attr_name)
        with self._lock:
            c = self._columns.pop(key, None)
            self._open.pop(key, None)
            if c is None:
                return False
            self._write_metadata()
        path = os.path.join(self.directory, c["file"])
        if os.path.exists(path):
            os.remove(path)
        return True

    # -- reading -------------------------------------------------------------
    def _get_tensor(self, attr: TensorAttr) -> Optional[Tensor]:
        arr = self._array((attr.group_name, attr.attr_name))
        index = attr.index
        if index is None or (isinstance(index, slice) and index == slice(None)):
            return torch.from_numpy(arr)  # the map itself: nothing read until touched
        idx = index.numpy() if isinstance(index, Tensor) else np.asarray(index)
        return torch.from_numpy(np.take(arr, idx.astype(np.int64, copy=False), axis=0))

    def _get_tensor_size(self, attr: TensorAttr) -> Optional[Tuple[int, ...]]:
        c = self._columns.get((attr.group_name, attr.attr_name))
        return None if c is None else tuple(int(s) for s in c["shape"])

    def get_all_tensor_attrs(self) -> List[TensorAttr]:
        """Every column, as PyG's ``TensorAttr(group_name, attr_name)``."""
        return [TensorAttr(g, a) for g, a in self._columns]

    # -- pickling: the directory, not the data -------------------------------
    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["_open"] = {}
        state.pop("_lock", None)
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__dict__["_lock"] = threading.Lock()

    def __repr__(self) -> str:
        return f"MemmapFeatureStore({self.directory!r}, columns={len(self._columns)})"
