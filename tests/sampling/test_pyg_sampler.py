"""``sampler="pyg"``: PyG's NeighborSampler behind the fixed-size loaders (torch-sparse /
pyg-lib), or an error that names what to install where neither imports."""
from __future__ import annotations

import warnings

import pytest
import torch
from torch_geometric.data import Data

from graph_adapter.sampling import FixedSizeLinkNeighborLoader
from graph_adapter.sampling import FixedSizeNeighborLoader
from graph_adapter.sampling import pyg_sampler
from graph_adapter.sampling import PygSamplerUnavailableError, pyg_sampler_backend


def _graph(n=300, m=2400, seed=0):
    g = torch.Generator().manual_seed(seed)
    return Data(x=torch.randn(n, 4, generator=g), edge_index=torch.randint(0, n, (2, m), generator=g),
                y=torch.randint(0, 3, (n,), generator=g), edge_attr=torch.randn(m, 2, generator=g))


def test_without_pyg_lib_or_torch_sparse_the_error_names_what_to_install(monkeypatch):
    if pyg_sampler_backend() is not None:  # here: it runs, and keeps no CSC of ours
        L = FixedSizeNeighborLoader(_graph(), [3, 2], 16, sampler="pyg")
        assert L.csc is None and L.batch(0, 0)["n_id"].numel() == int(L.budget.nodes)
        # as where neither imports (the README's install)
        monkeypatch.setattr(pyg_sampler, "pyg_sampler_backend", lambda: None)
    with pytest.raises(PygSamplerUnavailableError, match="pyg-lib or torch-sparse") as e:
        FixedSizeNeighborLoader(_graph(), [3, 2], 16, sampler="pyg")
    assert "pip install torch-sparse" in str(e.value) and "sampler='ours'" in str(e.value)


def test_an_unknown_sampler_is_named():
    with pytest.raises(ValueError, match=r"sampler='dgl'; choose one of \('ours', 'pyg'\)"):
        FixedSizeNeighborLoader(_graph(), [3], 16, sampler="dgl")


@pytest.mark.needs_scatter
@pytest.mark.parametrize("directed", [True, False])
def test_pyg_sampler_batches_one_signature_real_edges_every_seed_once(directed):
    d = _graph()
    kw = dict(shuffle=True, sampler="pyg", directed=directed, seed=3)
    L = FixedSizeNeighborLoader(d, [4, 3], 32, **kw)
    again = FixedSizeNeighborLoader(d, [4, 3], 32, budget=L.budget, **kw)
    state = torch.random.get_rng_state()
    sigs, seen = set(), []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for flat, same in zip(L, again):
            sigs.add(tuple((k, tuple(v.shape), v.dtype) for k, v in flat.items()))
            em, sm = flat["edge_mask"], flat["seed_mask"]
            seen.append(flat["n_id"][sm])
            # every sampled edge is an input edge, in input ids, with its attributes
            assert torch.equal(flat["n_id"][flat["edge_index"][:, em]],
                               d.edge_index[:, flat["e_id"][em]])
            assert torch.equal(flat["edge_attr"][em], d.edge_attr[flat["e_id"][em]])
            assert torch.equal(flat["x"][flat["node_mask"]], d.x[flat["n_id"][flat["node_mask"]]])
            for k in flat:  # a batch repeats for (seed, epoch, chunk)
                assert torch.equal(flat[k], same[k]), k
    assert torch.equal(torch.random.get_rng_state(), state)  # the caller's RNG untouched
    assert len(sigs) == 1
    assert sorted(torch.cat(seen).tolist()) == list(range(d.num_nodes))


@pytest.mark.needs_scatter
def test_pyg_sampler_feeds_the_link_loader():
    d = _graph()
    L = FixedSizeLinkNeighborLoader(d, [3], batch_size=40, sampler="pyg", shuffle=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        flats = list(L)
    assert L.stats.links == d.edge_index.size(1)
    f = flats[0]
    b = int((f["input_id"] >= 0).sum())
    pos = f["edge_label_index"][:, :b]
    assert torch.equal(f["n_id"][pos], d.edge_index[:, f["input_id"][:b]])
