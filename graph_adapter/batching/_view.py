"""The dataset as the padded collate sees it: items turned into graphs.

Datasets whose items are not ``Data`` / ``HeteroData`` (graphium's are dicts
``{"features": Data, "labels": ...}``) and datasets with float16 features are
read through a :class:`GraphView`: ``transform`` maps an item to a graph and
``float_dtype`` casts its floating tensors on the host.  The user's objects are
never changed: the cast is applied to a shallow copy of the graph.
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Optional, Sequence

import torch
from torch import Tensor

__all__ = ["GraphView", "as_graphs", "check_graph_item"]


def check_graph_item(item: Any, i: int, first: Any = None) -> None:
    """Raise a ``TypeError`` naming dataset index ``i`` unless ``item`` is a PyG graph
    (and, given graph 0 as ``first``, of graph 0's kind: ``Data`` or ``HeteroData``)."""
    from torch_geometric.data import Data, HeteroData

    if isinstance(item, (Data, HeteroData)):
        if first is not None and isinstance(item, HeteroData) != isinstance(first, HeteroData):
            raise TypeError(
                f"dataset item at index {i} is a {type(item).__name__}, item 0 is a "
                f"{type(first).__name__}: a dataset is all Data or all HeteroData (one Budget, "
                f"one schema); split it, or make every graph one kind with transform=.")
        return
    hint = ""
    if isinstance(item, dict):
        graphs = [k for k, v in item.items() if isinstance(v, (Data, HeteroData))]
        hint = (f" It is a dict with keys {sorted(item)[:8]}; pass transform=lambda item: "
                f"item[{graphs[0]!r}]" if graphs else " It is a dict; pass transform=")
        hint += " (a function from a dataset item to a Data) to Budget.fit / FixedSizeLoader."
    else:
        hint = (" Pass transform= (a function from a dataset item to a Data) to "
                "Budget.fit / FixedSizeLoader.")
    raise TypeError(f"dataset item at index {i} is a {type(item).__name__}, not a "
                    f"torch_geometric Data or HeteroData.{hint}")


def _cast(d: Any, float_dtype: torch.dtype) -> Any:
    """A shallow copy of graph ``d`` whose floating tensors are ``float_dtype``."""
    if not any(isinstance(v, Tensor) and v.is_floating_point() and v.dtype != float_dtype
               for st in d.stores for v in st.values()):
        return d
    out = copy.copy(d)  # new stores, same tensors: the user's graph is untouched
    return out.apply(lambda t: t.to(float_dtype) if t.is_floating_point() else t)


class GraphView(Sequence):
    """``dataset[i]`` through ``transform`` (item -> graph) and the ``float_dtype`` cast."""

    def __init__(self, dataset: Sequence[Any], transform: Optional[Callable[[Any], Any]] = None,
                 float_dtype: Optional[torch.dtype] = None):
        if float_dtype is not None and not (isinstance(float_dtype, torch.dtype)
                                            and float_dtype.is_floating_point):
            raise TypeError(f"float_dtype must be a floating torch.dtype (e.g. torch.float32) "
                            f"or None, got {float_dtype!r}")
        if transform is not None and not callable(transform):
            raise TypeError(f"transform must be a function from a dataset item to a Data, "
                            f"got {type(transform).__name__}")
        self.dataset = dataset
        self.transform = transform
        self.float_dtype = float_dtype

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i):  # type: ignore[override]
        d = self.dataset[i]
        if self.transform is not None:
            d = self.transform(d)
        if self.float_dtype is not None:
            check_graph_item(d, i)
            d = _cast(d, self.float_dtype)
        return d


def as_graphs(dataset: Sequence[Any], transform: Optional[Callable[[Any], Any]] = None,
              float_dtype: Optional[torch.dtype] = None) -> Sequence[Any]:
    """``dataset`` itself, or a :class:`GraphView` of it when there is anything to apply."""
    if transform is None and float_dtype is None:
        return dataset
    return GraphView(dataset, transform, float_dtype)
