"""Every public argument of ``FixedSizeLoader`` changes what it yields: a test that goes
red if the argument were silently ignored (replaced by its default).

Arguments held elsewhere (each of these tests was seen red with the argument dropped
from the call, i.e. at its default):

========================  ==========================================================
``shuffle``               ``test_loader.py::test_len_seed_and_set_epoch`` (epochs differ; fixed without)
``micro_batches``         ``test_loader.py::test_int32_micro_batches_and_tail_split_not_padded`` (leading dim F)
``oversize``              ``test_loader.py::test_oversize_error_and_skip``
``open_batches``          ``test_loader.py::test_len_seed_and_set_epoch`` (1: dataset order; 8: not)
``index_dtype``           ``test_loader.py::test_int32_micro_batches_and_tail_split_not_padded``
``rank`` / ``world_size`` ``test_loader.py::test_ranks_disjoint_same_length``, ``test_ranks.py``
``transform``             ``tests/format/test_bad_inputs.py::test_transform_and_float_dtype_for_graphium_style_items``
``float_dtype``           the same test (float16 in, float32 out; kept without it)
``exclude``               ``tests/format/test_bad_inputs.py::test_non_tensor_attribute_on_some_graphs_only_is_reported`` (a tensor key left out)
``validate``              ``tests/format/test_bad_inputs.py::test_index_check_can_be_skipped_explicitly``
``layout``,               ``test_layout.py::test_hyb_spills_given_share_one_shape_between_loaders``
``layout_widths``,        (the tables fitted; given widths and spills: the train loader's
``layout_spills``         shapes; fitted apart: others)
``device``                ``tests/backends/test_gpu_path.py::test_batches_moved_to_a_device_keep_every_key_dtype_and_shape`` (meta)
========================  ==========================================================

Here: ``seed``, ``packer``, ``tail``, ``columnar``, ``budget`` as a dict, the DataLoader keyword
arguments passing through (``num_workers``, ``worker_init_fn``), and the DataLoader
arguments the loader sets itself (``drop_last``, ``batch_size``, ...), refused by name.
"""
import os

import pytest
import torch
from torch_geometric.data import Data

from graph_adapter.batching import Budget, FixedSizeLoader, graph_sizes, plan_epoch


def _graphs(n=40):
    out = []
    for i in range(n):
        k = i % 7 + 1
        d = Data(x=torch.full((k, 2), float(i)),
                 edge_index=torch.stack([torch.arange(k), torch.arange(k).roll(1)]),
                 idx=torch.tensor([i]))
        out.append(d)
    return out


BUDGET = Budget(nodes=25, edges=24, graphs=6)


def _ids(loader):
    return [int(i) for item in loader for i in item["idx"][item["graph_mask"]].tolist()]


def test_seed_picks_the_shuffled_order():
    a, b = (FixedSizeLoader(_graphs(), BUDGET, shuffle=True, seed=s) for s in (0, 1))
    assert a.plan(0) != b.plan(0)
    assert _ids(a) != _ids(b)
    assert FixedSizeLoader(_graphs(), BUDGET, shuffle=True, seed=1).plan(0) == b.plan(0)


@pytest.mark.parametrize("packer", ["greedy", "histogram"])
def test_packer_is_the_one_that_plans(packer):
    """The loader's plan is the named packer's plan (the two differ on this dataset)."""
    gs = _graphs()
    ld = FixedSizeLoader(gs, BUDGET, packer=packer)
    want = plan_epoch(graph_sizes(gs), BUDGET, packer=packer, shuffle=False, seed=0, epoch=0)
    other = plan_epoch(graph_sizes(gs), BUDGET, shuffle=False, seed=0, epoch=0,
                       packer="histogram" if packer == "greedy" else "greedy")
    assert want != other
    assert ld.plan(0) == want
    assert sorted(_ids(ld)) == list(range(len(gs)))


class _Counting(torch.utils.data.Dataset):
    """A dataset that counts its reads and stamps each graph with the reading process."""

    def __init__(self, graphs):
        self.graphs, self.reads = graphs, 0

    def __len__(self):
        return len(self.graphs)

    def __getitem__(self, i):
        self.reads += 1
        d = self.graphs[i].clone()
        d.pid = torch.tensor([os.getpid()])
        d.mark = torch.tensor([_WORKER_MARK[0]])
        return d


_WORKER_MARK = [0]  # set by ``_mark_worker`` in a worker process


def test_columnar_false_fetches_the_graphs_of_each_batch_as_it_is_collated():
    for columnar in (True, False):
        ds = _Counting(_graphs(12))
        ld = FixedSizeLoader(ds, BUDGET, columnar=columnar)
        before = ds.reads
        assert sorted(_ids(ld)) == list(range(12))
        # columnar: every graph was read once, into the copy; else once a batch
        assert (ds.reads - before) == (0 if columnar else 12), columnar


def test_dataloader_arguments_pass_through():
    """``num_workers=1`` with ``columnar=False``: the graphs are read in a worker process;
    ``worker_init_fn`` runs there (its mark is on every graph the worker read)."""
    ds = _Counting(_graphs(12))
    ld = FixedSizeLoader(ds, BUDGET, columnar=False, num_workers=1,
                         worker_init_fn=_mark_worker)
    pids = {int(p) for item in ld for p in item["pid"][item["graph_mask"]].tolist()}
    assert pids and os.getpid() not in pids
    assert {int(m) for item in ld for m in item["mark"][item["graph_mask"]].tolist()} == {100}


def _mark_worker(worker_id):
    _WORKER_MARK[0] = 100 + worker_id


@pytest.mark.parametrize("key", ["batch_size", "shuffle", "sampler", "batch_sampler",
                                 "collate_fn", "drop_last"])
def test_dataloader_arguments_the_loader_sets_are_refused_by_name(key):
    """``shuffle`` is the loader's own argument; the others would change the plan behind
    its back (``drop_last``: the loader never drops a graph), so they are refused."""
    if key == "shuffle":
        FixedSizeLoader(_graphs(4), BUDGET, shuffle=True)  # its own keyword: accepted
        return
    with pytest.raises(TypeError, match=f"sets '{key}' itself"):
        FixedSizeLoader(_graphs(4), BUDGET, **{key: None})


def test_budget_as_a_dict_or_json_is_that_budget():
    for given in (BUDGET.to_dict(), BUDGET.to_json()):
        ld = FixedSizeLoader(_graphs(8), given)
        assert ld.budget == BUDGET
        assert next(iter(ld))["x"].shape[0] == BUDGET.nodes


def test_tail_pad_fills_with_padded_micro_batches_where_split_splits():
    graphs = [Data(x=torch.randn(4, 2), edge_index=torch.tensor([[0, 1, 2], [1, 2, 3]]))
              for _ in range(10)]
    b = Budget(nodes=13, edges=20, graphs=4)  # 2 graphs a batch: 5 packed batches, F = 3
    split = FixedSizeLoader(graphs, b, micro_batches=3)
    pad = FixedSizeLoader(graphs, b, micro_batches=3, tail="pad")
    assert len(split.plan(0)) == 6 and split.stats.padded_batches == 0  # one batch split
    assert len(pad.plan(0)) == 5 and pad.stats.padded_batches == 1
    last = list(pad)[-1]["graph_mask"]
    assert last.any(dim=1).tolist() == [True, True, False]
