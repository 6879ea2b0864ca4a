"""Hypothesis strategies for random PyG graphs (shared by the test modules)."""
from __future__ import annotations

import torch
from hypothesis import strategies as st
from torch_geometric.data import Data, HeteroData

__all__ = ["PairData", "graphs", "graph_lists", "hetero_graphs", "hetero_graph_lists", "schemas",
           "model_graphs", "model_graph_lists", "paddings", "ab_hetero_graphs"]

_FLOAT_DTYPES = (torch.float32, torch.float64)


class PairData(Data):
    """PyG's documented recipe for pairs of graphs (``__inc__`` per edge index)."""

    def __inc__(self, key, value, *args, **kwargs):
        if key == "edge_index_s":
            return self.x_s.size(0)
        if key == "edge_index_t":
            return self.x_t.size(0)
        return super().__inc__(key, value, *args, **kwargs)
_INT_DTYPES = (torch.int64, torch.int32, torch.uint8)


def _tensor(draw, shape, dtype):
    n = 1
    for s in shape:
        n *= s
    if dtype == torch.bool:
        values = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    elif dtype.is_floating_point:
        values = draw(
            st.lists(st.floats(-1e3, 1e3, allow_nan=False, width=32), min_size=n, max_size=n)
        )
    else:
        values = draw(st.lists(st.integers(0, 100), min_size=n, max_size=n))
    return torch.tensor(values, dtype=dtype).reshape(shape)


@st.composite
def schemas(draw):
    """Which optional attributes a family of graphs has (one schema per batch)."""
    return {
        "x_dim": draw(st.integers(1, 4)),
        "edge_attr": draw(st.one_of(st.none(), st.integers(1, 3))),
        "pos": draw(st.booleans()),
        "node_y": draw(st.booleans()),
        "edge_y": draw(st.booleans()),
        "graph_y": draw(st.one_of(st.none(), st.sampled_from(["float", "int", "vector"]))),
        "custom": draw(
            st.lists(st.sampled_from(["int", "float", "bool"]), max_size=2).map(
                lambda kinds: [(f"c_{i}_{k}", k) for i, k in enumerate(kinds)]
            )
        ),
        "string": draw(st.booleans()),
        "float_dtype": draw(st.sampled_from(_FLOAT_DTYPES)),
    }


@st.composite
def graphs(draw, schema=None, max_nodes=6, max_edges=10):
    """One random ``Data``: 0-node and 0-edge graphs and isolated nodes included."""
    schema = schema or draw(schemas())
    n = draw(st.integers(0, max_nodes))
    e = draw(st.integers(0, max_edges)) if n else 0
    src = draw(st.lists(st.integers(0, max(n - 1, 0)), min_size=e, max_size=e))
    dst = draw(st.lists(st.integers(0, max(n - 1, 0)), min_size=e, max_size=e))
    d = Data(
        x=_tensor(draw, (n, schema["x_dim"]), schema["float_dtype"]),
        edge_index=torch.tensor([src, dst], dtype=torch.long).reshape(2, e),
    )
    if schema["edge_attr"]:
        d.edge_attr = _tensor(draw, (e, schema["edge_attr"]), torch.float32)
    if schema["pos"]:
        d.pos = _tensor(draw, (n, 3), torch.float32)
    if schema["node_y"]:
        d.node_y = _tensor(draw, (n,), torch.int64)
    if schema["edge_y"]:
        d.edge_y = _tensor(draw, (e,), torch.float32)
    if schema["graph_y"] == "float":
        d.y = _tensor(draw, (1,), torch.float32)
    elif schema["graph_y"] == "int":
        d.y = _tensor(draw, (1,), torch.int64)
    elif schema["graph_y"] == "vector":
        d.y = _tensor(draw, (1, 2), torch.float32)
    for name, kind in schema["custom"]:
        dtype = {"int": torch.int32, "float": torch.float64, "bool": torch.bool}[kind]
        d[name] = _tensor(draw, (n, 2), dtype)
    if schema["string"]:
        d.smiles = draw(st.text(alphabet="CNO()=#123", max_size=8))
    d.num_nodes = n  # explicit, so that 0-node graphs stay exact
    return d


@st.composite
def graph_lists(draw, min_size=1, max_size=5):
    """A list of graphs of one schema (what one batch holds)."""
    schema = draw(schemas())
    return draw(st.lists(graphs(schema=schema), min_size=min_size, max_size=max_size))


@st.composite
def hetero_schemas(draw):
    node_types = draw(
        st.lists(st.sampled_from(["paper", "author", "venue"]), min_size=1, max_size=3, unique=True)
    )
    pairs = [(s, d) for s in node_types for d in node_types]
    edge_types = draw(
        st.lists(st.sampled_from(pairs), min_size=1, max_size=3, unique=True).map(
            lambda ps: [(s, f"to_{d}", d) for s, d in ps]
        )
    )
    dims = {nt: draw(st.integers(1, 3)) for nt in node_types}
    return {
        "node_types": node_types,
        "edge_types": edge_types,
        "dims": dims,
        "edge_attr": draw(st.booleans()),
        "graph_y": draw(st.booleans()),
        "string": draw(st.booleans()),
    }


@st.composite
def hetero_graphs(draw, schema=None, max_nodes=4, max_edges=6):
    schema = schema or draw(hetero_schemas())
    h = HeteroData()
    sizes = {}
    for nt in schema["node_types"]:
        n = draw(st.integers(0, max_nodes))
        sizes[nt] = n
        h[nt].x = _tensor(draw, (n, schema["dims"][nt]), torch.float32)
        h[nt].num_nodes = n
    for src, rel, dst in schema["edge_types"]:
        e = draw(st.integers(0, max_edges)) if sizes[src] and sizes[dst] else 0
        s = draw(st.lists(st.integers(0, max(sizes[src] - 1, 0)), min_size=e, max_size=e))
        d = draw(st.lists(st.integers(0, max(sizes[dst] - 1, 0)), min_size=e, max_size=e))
        h[src, rel, dst].edge_index = torch.tensor([s, d], dtype=torch.long).reshape(2, e)
        if schema["edge_attr"]:
            h[src, rel, dst].edge_attr = _tensor(draw, (e, 2), torch.float32)
    if schema["graph_y"]:
        h.y = _tensor(draw, (1,), torch.float32)
    if schema["string"]:
        h.name = draw(st.text(alphabet="abc", max_size=5))
    return h


@st.composite
def hetero_graph_lists(draw, min_size=1, max_size=4):
    schema = draw(hetero_schemas())
    return draw(st.lists(hetero_graphs(schema=schema), min_size=min_size, max_size=max_size))


# ----------------------------------------------- graphs for model properties
# The structure (node and edge counts, which nodes an edge joins) is drawn, so
# hypothesis shrinks it; feature values come from a drawn seed (drawing every
# float would make each example slow without finding more).
@st.composite
def model_graphs(draw, features=4, max_nodes=7, max_edges=14, min_nodes=0):
    """One ``Data`` for a model: ``x [n, features]``, ``edge_index``, ``y [1]``;
    0-node and 0-edge graphs, self-loops and repeated edges included."""
    n = draw(st.integers(min_nodes, max_nodes))
    e = draw(st.integers(0, max_edges)) if n else 0
    ends = st.lists(st.integers(0, max(n - 1, 0)), min_size=e, max_size=e)
    src, dst = draw(ends), draw(ends)
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    d = Data(x=torch.randn(n, features, generator=g),
             edge_index=torch.tensor([src, dst], dtype=torch.long).reshape(2, e),
             y=torch.randn(1, generator=g))
    d.num_nodes = n
    return d


def model_graph_lists(min_size=1, max_size=6, nonempty_last=False, **kw):
    """What one real micro-batch holds (see :func:`model_graphs`).

    ``nonempty_last``: the last graph has a node.  Eager PyG pools without a
    ``size`` to ``batch.max() + 1`` rows, so a trailing 0-node graph has no row
    in an eager reference (the padded path gives it one); 0-node graphs
    elsewhere in the list stay."""
    if not nonempty_last:
        return st.lists(model_graphs(**kw), min_size=min_size, max_size=max_size)
    head = st.lists(model_graphs(**kw), min_size=max(min_size - 1, 0), max_size=max_size - 1)
    last = model_graphs(**dict(kw, min_nodes=1))
    return st.tuples(head, last).map(lambda t: t[0] + [t[1]])


def paddings(max_nodes=6, max_edges=8, max_graphs=10):
    """Padding added on top of a batch: (extra nodes >= 1, extra edges >= 0,
    extra graph slots >= 1); many empty graph slots included."""
    return st.tuples(st.integers(1, max_nodes), st.integers(0, max_edges),
                     st.integers(1, max_graphs))


@st.composite
def ab_hetero_graphs(draw, features=3, max_nodes=4, max_edges=6):
    """A ``HeteroData`` with node types ``a``, ``b`` and edge types ``(a, r, b)``,
    ``(b, s, a)``: either node type may be empty (then its edges are too)."""
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    h = HeteroData()
    sizes = {t: draw(st.integers(0, max_nodes)) for t in ("a", "b")}
    for t, n in sizes.items():
        h[t].x = torch.randn(n, features, generator=g)
        h[t].num_nodes = n
    for src, rel, dst in (("a", "r", "b"), ("b", "s", "a")):
        e = draw(st.integers(0, max_edges)) if sizes[src] and sizes[dst] else 0
        s = draw(st.lists(st.integers(0, max(sizes[src] - 1, 0)), min_size=e, max_size=e))
        t = draw(st.lists(st.integers(0, max(sizes[dst] - 1, 0)), min_size=e, max_size=e))
        h[src, rel, dst].edge_index = torch.tensor([s, t], dtype=torch.long).reshape(2, e)
    h.y = torch.randn(1, generator=g)
    return h
