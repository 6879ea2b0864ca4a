"""FixedSizeHeteroNeighborLoader(sampler="pyg"): PyG's hetero sampler (torch-sparse /
pyg-lib) padded the same way as ours; where neither imports, an error naming the install."""
from __future__ import annotations

import warnings

import pytest
import torch

from graph_adapter.sampling import pyg_sampler
from graph_adapter.sampling import FixedSizeHeteroNeighborLoader
from graph_adapter.sampling import PygSamplerUnavailableError

from test_hetero_neighbor import ETS, _hetero


def test_without_pyg_lib_or_torch_sparse_the_error_names_what_to_install(monkeypatch):
    h = _hetero(20, 10, (50, 50), 0)
    monkeypatch.setattr(pyg_sampler, "pyg_sampler_backend", lambda: None)
    with pytest.raises(PygSamplerUnavailableError, match="pyg-lib or torch-sparse") as e:
        FixedSizeHeteroNeighborLoader(h, [2], 4, input_nodes=("paper", None), sampler="pyg")
    assert "pip install torch-sparse" in str(e.value) and "sampler='ours'" in str(e.value)
    monkeypatch.setattr(pyg_sampler, "pyg_sampler_backend", lambda: "torch-sparse")
    with pytest.raises(PygSamplerUnavailableError, match="disjoint=True on HeteroData needs "
                                                         "pyg-lib"):
        FixedSizeHeteroNeighborLoader(h, [2], 4, input_nodes=("paper", None), sampler="pyg",
                                      disjoint=True)
    with pytest.raises(ValueError, match=r"sampler='dgl'; choose one of"):
        FixedSizeHeteroNeighborLoader(h, [2], 4, input_nodes=("paper", None), sampler="dgl")


@pytest.mark.needs_scatter
@pytest.mark.parametrize("directed", [True, False])
def test_pyg_hetero_batches_real_edges_seeds_once_repeatable(directed):
    h = _hetero(80, 40, (300, 300), 2)
    kw = dict(input_nodes=("paper", None), shuffle=True, sampler="pyg", directed=directed,
              seed=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyG: "NeighborSampler without pyg-lib is deprecated"
        L = FixedSizeHeteroNeighborLoader(h, [3, 2], 8, **kw)
        again = FixedSizeHeteroNeighborLoader(h, [3, 2], 8, budget=L.budget, **kw)
    assert L.cscs == {} and L._pyg is not None  # PyG's CSCs, none of ours
    state = torch.random.get_rng_state()
    sigs, seen = set(), []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for f, same in zip(L, again):
            sigs.add(tuple((k, tuple(v.shape)) for k, v in f.items()))
            b = int(f["paper/seed_mask"].sum())
            seen.append(f["paper/n_id"][:b])
            for t in ("paper", "author"):
                nm, nid = f[f"{t}/node_mask"], f[f"{t}/n_id"]
                assert torch.equal(f[f"{t}/x"][nm], h[t].x[nid[nm]])
                assert bool((nid[~nm] == -1).all())
            for et in ETS:
                k = "__".join(et)
                em = f[f"{k}/edge_mask"]
                ei = f[f"{k}/edge_index"][:, em]
                glob = torch.stack([f[f"{et[0]}/n_id"][ei[0]], f[f"{et[2]}/n_id"][ei[1]]])
                assert torch.equal(glob, h[et].edge_index[:, f[f"{k}/e_id"][em]])
            for k in f:  # a batch repeats for (seed, epoch, chunk)
                assert torch.equal(f[k], same[k]), k
    assert torch.equal(torch.random.get_rng_state(), state)  # the caller's RNG untouched
    assert len(sigs) == 1
    assert sorted(torch.cat(seen).tolist()) == list(range(80))


@pytest.mark.needs_scatter
def test_pyg_and_ours_take_the_same_subgraph_when_nothing_is_drawn():
    """Fanouts -1 / 0 draw nothing: PyG's sampler and ours reach the same nodes of each
    type and the same edges of each edge type (the semantics, not the draws)."""
    h = _hetero(60, 30, (200, 200), 6)
    fan = {ETS[0]: [-1, 0], ETS[1]: [0, -1], ETS[2]: [-1, -1]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        P = FixedSizeHeteroNeighborLoader(h, fan, 6, input_nodes=("paper", None), sampler="pyg")
    O = FixedSizeHeteroNeighborLoader(h, fan, 6, input_nodes=("paper", None))
    for c in range(3):
        seeds = O.chunk_seeds(0, c)
        p, o = P.sample(seeds, 0, c), O.sample(seeds, 0, c)
        assert torch.equal(p.n_id["paper"][:6], seeds) and torch.equal(o.n_id["paper"][:6], seeds)
        for t in ("paper", "author"):
            assert sorted(p.n_id[t].tolist()) == sorted(o.n_id[t].tolist())
        for et in ETS:
            assert sorted(p.e_id[et].tolist()) == sorted(o.e_id[et].tolist())


@pytest.mark.needs_scatter
def test_pyg_and_ours_sample_as_many_nodes_of_each_type_on_average():
    """With draws (k = 2 per edge type and hop) the per-type sizes agree in mean: 80
    batches each, within 4 standard errors (the seeds are fixed: no flake)."""
    h = _hetero(300, 150, (1500, 1500), 8)
    kw = dict(input_nodes=("paper", None), shuffle=True, seed=1, fit_batches=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        P = FixedSizeHeteroNeighborLoader(h, [2, 2], 4, sampler="pyg", **kw)
    O = FixedSizeHeteroNeighborLoader(h, [2, 2], 4, **kw)
    with O._sampling_threads():  # 1 thread, as the loader samples (2: 15 ms a small op here)
        sizes = [[L.sample(L.chunk_seeds(e, c), e, c).sizes()[0] for e in range(2)
                  for c in range(40)] for L in (P, O)]
    for t in ("paper", "author"):
        a, b = (torch.tensor([s[t] for s in z], dtype=torch.float64) for z in sizes)
        se = ((a.var() + b.var()) / 80).sqrt()
        assert abs(float(a.mean() - b.mean())) < 4 * float(se) + 1e-9, (t, a.mean(), b.mean())
