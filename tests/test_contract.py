"""The contract (graph_adapter/contract.py): its rules as properties, its independence of
torch, and that the stages which pad (collate, the serving packer) follow its rules."""
import importlib.util
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from graph_adapter import contract as C

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ------------------------------------------------------------------ no torch needed
def test_contract_imports_without_torch_or_numpy():
    """The serving runtime of an ONNX artifact runs without torch: the contract must too."""
    code = textwrap.dedent(f"""
        import importlib.abc, importlib.util, sys
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name.split(".")[0] in ("torch", "numpy", "torch_geometric"):
                    raise ModuleNotFoundError(f"blocked: {{name}}")
        sys.meta_path.insert(0, Block())
        spec = importlib.util.spec_from_file_location(
            "contract", {os.path.join(ROOT, "graph_adapter", "contract.py")!r})
        c = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(c)
        class Arr:  # anything with .shape and .dtype
            def __init__(self, shape, dtype): self.shape, self.dtype = shape, dtype
        sig = c.Signature.of({{"x": Arr((4, 3), "float32"), "graph_mask": Arr((2,), "bool")}})
        assert sig["x"].shape == (4, 3)
        assert c.slot_counts([3], 3, 5) == [3, 1, 4]
        assert not any(m.split(".")[0] in ("torch", "numpy") for m in sys.modules)
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


# ------------------------------------------------------------------ keys
names = st.text("abcxyz_", min_size=1, max_size=6).filter(lambda s: "__" not in s
                                                          and not s.startswith("_")
                                                          and not s.endswith("_"))


@given(st.one_of(st.just(()), st.tuples(names), st.tuples(names, names, names)), names)
def test_key_of_parse_key_round_trip(store, attr):
    assert C.parse_key(C.key_of(store, attr)) == (store, attr)
    assert C.attr_of(C.key_of(store, attr)) == attr


def test_reserved_keys_are_distinct_and_cover_the_layout_tables():
    assert len(set(C.ALL_RESERVED_KEYS)) == len(C.ALL_RESERVED_KEYS)
    assert all(C.is_layout_key(k) for k in C.LAYOUT_KEYS)
    assert C.is_layout_key("paper/in_slots") and not C.is_layout_key("x")
    assert {C.LEVEL_OF_MASK[m] for m in C.MASKS} == {"node", "edge", "graph"}


# ------------------------------------------------------------------ padding
@st.composite
def batches(draw):
    """(real node counts, G, N) of a batch that fits one call."""
    G = draw(st.integers(2, 12))
    real = draw(st.lists(st.integers(0, 9), max_size=G - 1))
    N = sum(real) + max(C.RESERVED_NODES, G - len(real)) + draw(st.integers(0, 6))
    return real, G, N


@given(batches())
def test_slot_counts_lay_out_the_padding_rule(b):
    real, G, N = b
    assert C.fits(len(real), sum(real), 0, G, N, 0)
    counts = C.slot_counts(real, G, N - sum(real))
    assert len(counts) == G and sum(counts) == N
    assert counts[:len(real)] == real                      # real graphs first, as given
    assert all(c >= 1 for c in counts[len(real):])         # no empty padding slot
    assert counts[-1] >= 1                                 # the padding edges' node is in G - 1
    ones = counts[len(real):-1]
    assert all(c == 1 for c in ones)                       # one each, the rest in the last


@given(st.integers(2, 40), st.integers(2, 200), st.integers(0, 50))
def test_max_graph_nodes_is_the_largest_graph_that_fits_alone(G, N, E):
    most = C.max_graph_nodes(G, N)
    if most >= 0:
        assert C.fits(1, most, 0, G, N, E)
    assert not C.fits(1, most + 1, 0, G, N, E)


@given(st.integers(0, 30), st.integers(0, 300), st.integers(0, 300), st.integers(2, 30),
       st.integers(2, 300), st.integers(0, 300))
def test_misfit_names_what_does_not_fit(g, n, e, G, N, E):
    why = C.misfit(g, n, e, G, N, E)
    ok = g <= G - 1 and n <= N - C.RESERVED_NODES and e <= E and N - n >= G - g
    assert (why == "") == ok
    if why:
        assert any(w in why for w in ("graphs", "nodes", "edges"))


def test_pad_value():
    assert np.isnan(C.pad_value("graph", "float32"))
    assert C.pad_value("node", "float32") == 0
    assert C.pad_value("graph", "int64") == 0
    assert C.pad_value("graph", "bool") is False
    assert C.padding_node(10) == 9


def test_collate_follows_the_contract():
    """The collate lays a batch out by the contract's rules (the serving packer calls
    the same functions)."""
    from torch_geometric.data import Data

    import graph_adapter as ga

    graphs = [Data(x=torch.randn(n, 2), edge_index=torch.tensor([[0], [n - 1]]))
              for n in (3, 1, 4)]
    budget = ga.Budget(nodes=14, edges=7, graphs=6)
    flat = ga.collate_padded(graphs, budget)
    counts = torch.bincount(flat["batch"], minlength=budget.graphs).tolist()
    assert counts == C.slot_counts([3, 1, 4], 6, 14 - 8)
    assert flat["edge_index"][:, 3:].eq(C.padding_node(14)).all()
    assert flat["x"][8:].eq(C.pad_value("node", "float32")).all()


# ------------------------------------------------------------------ signature
shapes = st.lists(st.integers(0, 5), max_size=3).map(tuple)
flats = st.dictionaries(st.sampled_from(["x", "edge_index", "y", "graph_mask", "batch"]),
                        st.tuples(shapes, st.sampled_from([torch.float32, torch.int64])),
                        min_size=1)


def _tensors(d):
    return {k: torch.zeros(s, dtype=dt) for k, (s, dt) in d.items()}


@settings(max_examples=60)
@given(flats, flats)
def test_signature_equality_hash_and_difference(a, b):
    sa, sb = C.Signature.of(_tensors(a)), C.Signature.of(_tensors(b))
    assert (sa == sb) == (a == b)
    assert (sa.difference(sb) == "") == (a == b)
    if sa == sb:
        assert hash(sa) == hash(sb)
    # key order does not matter, as for dicts
    rev = C.Signature.of(dict(reversed(list(_tensors(a).items()))))
    assert rev == sa and hash(rev) == hash(sa)
    # JSON round trip (dtypes as names)
    assert C.Signature.from_json(sa.to_json()) == sa.named()


def test_signature_strips_the_micro_batch_dim_and_names_bad_values():
    flat = {"x": torch.zeros(2, 5, 3), "graph_mask": torch.ones(2, 4, dtype=torch.bool)}
    sig = C.Signature.of(flat, strip_micro=True)
    assert sig["x"].shape == (5, 3) and sig["graph_mask"].shape == (4,)
    with pytest.raises(C.UnsupportedAttributeError, match="'y' is a list"):
        C.Signature.of({"x": torch.zeros(1), "y": [1]})
    with pytest.raises(C.SpecFormatError):
        C.Signature.from_json([["x", "float32"]])
    import copy

    assert copy.deepcopy(sig) == sig and copy.copy(sig) == sig
    with pytest.raises(TypeError, match="read-only"):
        sig["x"] = sig["x"]
    old = C.Signature.of({"in_slots": torch.zeros(4, 2, dtype=torch.long)})
    new = C.Signature.of({"in_slots": torch.zeros(4, 3, dtype=torch.long)})
    assert "layout table" in old.difference(new)


def test_the_examples_in_the_contracts_docstrings_hold():
    import doctest

    result = doctest.testmod(C)
    assert result.attempted >= 5 and result.failed == 0


def test_one_error_family():
    """The host's and the server's errors for the same failure are one family."""
    from graph_adapter.serve import errors as serve_errors

    pairs = [(serve_errors.MissingFeatureError, C.MissingKeyError),
             (serve_errors.FeatureDtypeError, C.DtypeMismatchError),
             (serve_errors.FeatureShapeError, C.ShapeMismatchError),
             (serve_errors.EdgeIndexError, C.InputValueError),
             (serve_errors.GraphTooLargeError, C.BatchMismatchError)]
    for served, host in pairs:
        assert issubclass(served, host) and issubclass(served, C.SpecError)
    e = serve_errors.MissingFeatureError("graph 2 has no 'x'", 2, "x")
    assert str(e) == "graph 2 has no 'x'" and e.graph == 2 and isinstance(e, KeyError)
    from graph_adapter import format as F

    assert F.SpecError is C.SpecError and F.ShapeChangedError is C.ShapeChangedError


def _spelt_keys(path, keys):
    """``(line, key)`` where a module indexes, looks up or compares with a reserved key
    spelt as a string (``flat["batch"]``, ``d.get("node_mask")``, ``k == "ptr"``)."""
    import ast

    found = []
    for node in ast.walk(ast.parse(open(path).read())):
        consts = []
        if isinstance(node, ast.Subscript):
            consts = [node.slice]
        elif isinstance(node, ast.Compare):
            if any(isinstance(s, ast.Attribute) and s.attr == "op"
                   for s in [node.left, *node.comparators]):
                continue  # an FX node's op ("output"), not a key
            consts = [node.left, *node.comparators]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("get", "pop", "setdefault") and node.args):
            consts = [node.args[0]]
        found += [(node.lineno, c.value) for c in consts
                  if isinstance(c, ast.Constant) and c.value in keys]
    return found


def test_the_library_names_reserved_keys_only_through_the_contract():
    """One home per key: a module of the library (the ``graph-adapter`` application
    aside, which reads outputs as a user does) never spells a reserved key."""
    keys = set(C.ALL_RESERVED_KEYS) | {C.OUTPUT_KEY, C.LOSS_KEY}
    package = os.path.join(ROOT, "graph_adapter")
    bad = []
    for folder, _, files in os.walk(package):
        if os.path.relpath(folder, package).split(os.sep)[0] == "app":
            continue
        for f in files:
            path = os.path.join(folder, f)
            if f.endswith(".py") and path != C.__file__:
                bad += [f"{os.path.relpath(path, ROOT)}:{line}: {key!r}"
                        for line, key in _spelt_keys(path, keys)]
    assert not bad, "use the contract's constant (graph_adapter.contract):\n" + "\n".join(bad)


def test_the_spelt_key_check_sees_each_form(tmp_path):
    src = tmp_path / "m.py"
    src.write_text('a = flat["batch"]\nb = d.get("node_mask")\nc = k == "ptr"\n'
                   'd = u.op == "output"\ne = flat[BATCH]\n')
    assert _spelt_keys(str(src), {"batch", "node_mask", "ptr", "output"}) == [
        (1, "batch"), (2, "node_mask"), (3, "ptr")]
