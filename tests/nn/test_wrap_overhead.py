"""The eager hot path of ``ipu_wrap`` (issue 14 item 2): the checks and the
inferred spec are done once per input signature, ``unflatten`` builds the
batch without PyG's per-instance signature read. Nothing a user sees may
change: every documented error still comes, on every call whose input has it.

The differential property test runs each sequence of inputs through a
wrapper with its caches and through one whose caches are disabled (every call
takes the uncached path, the code before the caches) and asserts the same
outcome, error class and message included, call by call.
"""
import copy

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch_geometric.data import Batch, Data, HeteroData
from torch_geometric.nn import global_add_pool

import graph_adapter.format.classes as C
import graph_adapter.nn.wrap as W
from graph_adapter.format import (DeviceMismatchError, DtypeMismatchError, ShapeMismatchError,
                                  UnsupportedAttributeError, infer_spec, unflatten)
from graph_adapter.nn.wrap import StaticData, ipu_wrap

from _padding import pad_batch, random_graphs


def _flat(seed=0, extra=0, features=4):
    graphs = random_graphs(torch.Generator().manual_seed(seed), 3, features=features)
    b = Batch.from_data_list(graphs)
    return pad_batch(graphs, b.num_nodes + 2 + extra, b.edge_index.size(1) + 3 + extra,
                     b.num_graphs + 2)


class Net(torch.nn.Module):
    def __init__(self, features=4):
        super().__init__()
        self.lin = torch.nn.Linear(features, 3)
        self.bn = torch.nn.BatchNorm1d(3)

    def forward(self, x, edge_index, batch):
        h = self.bn(self.lin(x)).relu()
        return global_add_pool(h[edge_index[0]], batch[edge_index[1]], size=batch.numel())


class DataNet(Net):
    def forward(self, data):
        return super().forward(data.x, data.edge_index, data.batch)


class _CountingInfer:
    def __init__(self, monkeypatch):
        self.calls = 0
        monkeypatch.setattr(W, "infer_spec", self)

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return infer_spec(*args, **kwargs)


class _CountingCheck:
    def __init__(self, monkeypatch):
        self.calls = 0
        real = W.IPUWrapped._check

        def check(wrapped, flat, mode):
            self.calls += 1
            return real(wrapped, flat, mode)
        monkeypatch.setattr(W.IPUWrapped, "_check", check)


# --------------------------------------------------------------------------
# The caches are keyed by the whole signature
# --------------------------------------------------------------------------
def test_spec_inferred_and_checked_once_per_signature(monkeypatch):
    infer, check = _CountingInfer(monkeypatch), _CountingCheck(monkeypatch)
    w = ipu_wrap(Net())
    a = _flat(0)
    for _ in range(3):
        w(a)
        w(_flat(0))  # other tensors, the same signature
    assert (infer.calls, check.calls) == (1, 1)
    w({k: v.clone() for k, v in a.items()})
    assert (infer.calls, check.calls) == (1, 1)


@pytest.mark.parametrize("change", ["rows", "dtype", "keys", "feature_dim"])
def test_a_new_signature_is_inferred_and_checked_again(monkeypatch, change):
    """A cache keyed by anything less than (key, shape, dtype, device) of
    every value goes red here (keys only, shapes only, ...)."""
    infer, check = _CountingInfer(monkeypatch), _CountingCheck(monkeypatch)
    # a changed dtype or feature dim is an error when checked (test below):
    # unchecked, the spec alone must follow it
    checked = change in ("rows", "keys")
    w = ipu_wrap(Net(), check_inputs=checked)
    a = _flat(0)
    w(a)
    if change == "rows":
        b = _flat(0, extra=3)
    elif change == "dtype":
        b = dict(a, y=a["y"].double())
    elif change == "keys":
        b = {k: v for k, v in a.items() if k != "y"}
    else:
        b = dict(a, y=a["y"].unsqueeze(1).repeat(1, 2))
    w(b)
    assert infer.calls == 2
    assert check.calls == (2 if checked else 0)
    spec = w._specs[W._signature_key(b)]
    assert spec == infer_spec(b, data_cls=StaticData)


@pytest.mark.parametrize("bad,err", [
    (lambda f: dict(f, node_mask=f["node_mask"].to(torch.uint8)), DtypeMismatchError),
    (lambda f: dict(f, edge_index=f["edge_index"].float()), DtypeMismatchError),
    (lambda f: dict(f, edge_index=f["edge_index"].t().contiguous()), ShapeMismatchError),
    (lambda f: dict(f, x=torch.cat([f["x"], f["x"]], 1)), ShapeMismatchError),
    (lambda f: dict(f, x=f["x"].double()), DtypeMismatchError),
    (lambda f: dict(f, y=f["y"].tolist()), UnsupportedAttributeError),
])
def test_a_bad_input_after_good_ones_is_still_caught(bad, err):
    """Same keys as the good batches, so a cache keyed by the key set (or a
    check skipped after the first call) would let these through."""
    w = ipu_wrap(Net())
    f = _flat(0)
    w(f)
    w(f)
    with pytest.raises(err):
        w(bad(f))
    w(f)  # and the good signature still passes


def test_model_moved_after_a_good_call_is_checked_again():
    """The model's device is part of the record: the same input signature
    against a model now on another device is a DeviceMismatchError."""
    w = ipu_wrap(Net())
    f = _flat(0)
    w(f)
    w.to("meta")
    with pytest.raises(DeviceMismatchError, match="model's parameters"):
        w(f)


class WidthFree(torch.nn.Module):
    """Takes any feature width (so that two schemas both run)."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(1))

    def forward(self, x, edge_index, batch):
        return global_add_pool(x.sum(1, keepdim=True) * self.w, batch, size=batch.numel())


def test_reset_inputs_forgets_the_record():
    """After ``reset_inputs`` a signature that passed before is compared with
    the new first batch again (red if the record survives the reset)."""
    w = ipu_wrap(WidthFree())
    a = _flat(0)
    b = dict(a, x=torch.cat([a["x"], a["x"]], 1))
    w(a)
    with pytest.raises(ShapeMismatchError, match="reset_inputs"):
        w(b)
    w.reset_inputs()
    w(b)  # the new first batch
    with pytest.raises(ShapeMismatchError, match="reset_inputs"):
        w(a)


def test_check_inputs_turned_on_later_checks():
    w = ipu_wrap(Net(), check_inputs=False)
    f = _flat(0)
    bad = dict(f, node_mask=f["node_mask"].to(torch.uint8))
    w(f)
    w.check_inputs = True
    with pytest.raises(DtypeMismatchError):
        w(bad)


def test_caches_stay_bounded():
    w = ipu_wrap(Net())
    for extra in range(W._CACHE_SIZE + 5):
        w(_flat(0, extra=extra))
    assert len(w._specs) <= W._CACHE_SIZE and len(w._checked) <= W._CACHE_SIZE


def test_signature_key_unkeyable():
    assert W._signature_key({"x": [1, 2]}) is None
    f = _flat(0)
    assert W._signature_key(f) == W._signature_key({k: v.clone() for k, v in f.items()})
    assert W._signature_key(f) != W._signature_key(dict(f, y=f["y"].double()))


# --------------------------------------------------------------------------
# Differential: cached wrapper == uncached wrapper, call by call
# --------------------------------------------------------------------------
_MUTATIONS = {
    "ok": lambda f: f,
    "other_rows": lambda f: _flat(1, extra=2),
    "mask_uint8": lambda f: dict(f, node_mask=f["node_mask"].to(torch.uint8)),
    "edge_index_T": lambda f: dict(f, edge_index=f["edge_index"].t().contiguous()),
    "edge_index_float": lambda f: dict(f, edge_index=f["edge_index"].float()),
    "x_wider": lambda f: dict(f, x=torch.cat([f["x"], f["x"]], 1)),
    "x_double": lambda f: dict(f, x=f["x"].double()),
    "y_double": lambda f: dict(f, y=f["y"].double()),
    "no_y": lambda f: {k: v for k, v in f.items() if k != "y"},
    "y_list": lambda f: dict(f, y=f["y"].tolist()),
    "no_graph_mask": lambda f: {k: v for k, v in f.items() if k != "graph_mask"},
    "no_batch": lambda f: {k: v for k, v in f.items() if k != "batch"},
    "micro_batch": lambda f: {k: v.unsqueeze(0) for k, v in f.items()},
    "reset": None,
    "to_meta": None,
    "to_cpu": None,
}


def _outcome(w, f):
    try:
        out = w(f)
    except Exception as e:  # noqa: BLE001 - the outcome under comparison
        return ("error", type(e).__name__, str(e))
    return ("ok", {k: v.detach() for k, v in out.items()})


class _Uncached(W.IPUWrapped):
    """The reference: every call checks and infers, as before the caches."""

    def _eager_spec(self, flat, mode, key=None):
        if self.check_inputs:
            self._check(flat, mode)
        return infer_spec(flat, data_cls=StaticData)


@pytest.mark.parametrize("net", [Net, DataNet])
@given(steps=st.lists(st.sampled_from(sorted(_MUTATIONS)), min_size=1, max_size=7))
def test_cached_path_matches_uncached(net, steps):
    torch.manual_seed(0)
    cached = ipu_wrap(net()).eval()
    plain = copy.deepcopy(cached)
    plain.__class__ = _Uncached
    state = copy.deepcopy(cached.state_dict())
    base = _flat(0)
    for step in steps:
        if step == "reset":
            cached.reset_inputs(), plain.reset_inputs()
            continue
        if step in ("to_meta", "to_cpu"):
            for w in (cached, plain):
                if step == "to_meta":
                    w.to("meta")
                else:  # a meta model's parameters have no data: allocate, reload
                    w.to_empty(device="cpu")
                    w.load_state_dict(state)
            continue
        f = _MUTATIONS[step](base)
        a, b = _outcome(cached, f), _outcome(plain, f)
        assert a[0] == b[0], (step, a, b)
        if a[0] == "error":
            assert a == b, step
        else:
            assert a[1].keys() == b[1].keys()
            for k in a[1]:
                torch.testing.assert_close(a[1][k], b[1][k], equal_nan=True)


# --------------------------------------------------------------------------
# unflatten's eager construction == the traced one
# --------------------------------------------------------------------------
class Needy(Data):
    """A Data subclass with a required ``__init__`` argument (PyG fills None)."""

    def __init__(self, tag, **kwargs):
        super().__init__(**kwargs)
        self.tag_seen = tag is None


def _hetero_flat():
    from graph_adapter import Budget, FixedSizeLoader
    graphs = []
    for i in range(4):
        h = HeteroData()
        h["a"].x = torch.randn(2 + i % 2, 3)
        h["b"].x = torch.randn(3, 3)
        h["a", "to", "b"].edge_index = torch.tensor([[0, 1], [2, 0]])
        h.y = torch.randn(1)
        graphs.append(h)
    return next(iter(FixedSizeLoader(graphs, Budget.fit(graphs, 2))))


@pytest.mark.parametrize("case", ["static", "data", "needy", "hetero"])
def test_eager_unflatten_equals_the_metaclass_path(monkeypatch, case):
    flat = _hetero_flat() if case == "hetero" else _flat(0)
    cls = {"static": StaticData, "data": Data, "needy": Needy, "hetero": None}[case]
    spec = infer_spec(flat, data_cls=cls)
    fast = unflatten(flat, spec, validate=False)
    monkeypatch.setattr(C, "new_eager", C.new)
    slow = unflatten(flat, spec, validate=False)
    assert type(fast) is type(slow)
    assert set(fast.__dict__) == set(slow.__dict__)
    stores = zip(fast.stores, slow.stores)
    for a, b in stores:
        assert type(a) is type(b) and list(a.keys()) == list(b.keys())
        assert all(a[k] is b[k] for k in a.keys())
        assert set(a.__dict__) == set(b.__dict__)
    if case == "needy":
        assert fast.tag_seen and slow.tag_seen
    assert fast.num_graphs == slow.num_graphs
    if case != "hetero":
        assert fast.num_nodes == slow.num_nodes
    if case != "hetero":  # the rebuilt store behaves as PyG's own (deletion by None)
        fast.x = None
        assert "x" not in fast


def test_first_param_matches_parameters():
    class Shared(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_parameter("none", None)
            self.empty = torch.nn.Module()
            inner = torch.nn.Linear(2, 2)
            self.a = torch.nn.Sequential(torch.nn.ReLU(), inner)
            self.b = inner
            self.own = torch.nn.Parameter(torch.zeros(1))

    class Custom(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)
            self.other = torch.nn.Parameter(torch.ones(3))

        def parameters(self, recurse=True):
            yield self.other

    for m in (Shared(), Custom(), torch.nn.ReLU(), torch.nn.Sequential(torch.nn.ReLU()),
              Net(), torch.nn.Sequential(torch.nn.Module(), torch.nn.Linear(1, 1))):
        assert W._first_param(m) is next(m.parameters(), None), type(m)
