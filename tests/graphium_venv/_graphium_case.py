"""Shared by tests/graphium_venv: graphium's featurizer on rdkit's NCI molecules, and
FullGraphMultiTaskNetwork built from a graphium YAML-style config (``load_architecture``).

Import only after graphium imported (the test modules skip first).
"""
from __future__ import annotations

import contextlib
import copy
import os
from typing import Dict, Iterator, List

import numpy as np
import torch
from torch_geometric.data import Data

from graphium.config._loader import load_architecture
from graphium.features import featurizer as gfeat

#: graphium's own featurization of its ZINC configs (graphium/config/zinc_default_multitask_pyg.yaml)
FEATURIZATION = dict(atom_property_list_onehot=["atomic-number", "degree"],
                     atom_property_list_float=[],
                     edge_property_list=["in-ring", "bond-type-onehot"],
                     add_self_loop=False, explicit_H=False, use_bonds_weights=False)


@contextlib.contextmanager
def float32_adjacency() -> Iterator[None]:
    """graphium 2.4.7's ``mol_to_graph_dict`` does not pass its ``dtype`` on to
    ``mol_to_adj_and_features``, whose default float16 reaches ``scipy.sparse.coo_matrix``;
    scipy >= 1.13 refuses float16 ("scipy.sparse does not support dtype float16";
    graphium issue #539, open). The adjacency is built as float32 for the duration
    (it only gives ``edge_index``); everything else is graphium's own code."""
    original = gfeat.mol_to_adjacency_matrix

    def adjacency(mol, use_bonds_weights=False, add_self_loop=False, dtype=np.float32):
        return original(mol, use_bonds_weights=use_bonds_weights, add_self_loop=add_self_loop,
                        dtype=np.float32)

    gfeat.mol_to_adjacency_matrix = adjacency
    try:
        yield
    finally:
        gfeat.mol_to_adjacency_matrix = original


def nci_smiles(count: int) -> List[tuple]:
    """``(smiles, tpsa)`` of the first ``count`` molecules of rdkit's NCI set (ships in rdkit)."""
    from rdkit import RDConfig

    path = os.path.join(RDConfig.RDDataDir, "NCI", "first_5k.tpsa.csv")
    rows = []
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            smiles, tpsa = line.rsplit(",", 1)
            rows.append((smiles, float(tpsa)))
            if len(rows) == count:
                break
    return rows


def featurize(count: int) -> List[Data]:
    """graphium's featurizer (``mol_to_pyggraph``, float32) on NCI molecules, target
    ``y`` = standardized TPSA ([1, 1] a graph), ``edge_index`` cast to int64. Molecules graphium cannot featurize
    (it returns an error string) are dropped and counted in ``featurize.skipped``."""
    rows = nci_smiles(count)
    out, skipped = [], []
    with float32_adjacency():
        for smiles, tpsa in rows:
            g = gfeat.mol_to_pyggraph(smiles, **FEATURIZATION, dtype=np.float32, on_error="ignore")
            if isinstance(g, str):  # graphium's on_error="ignore": the error message
                skipped.append((smiles, g))
                continue
            g.y = torch.tensor([[tpsa]], dtype=torch.float32)
            # scipy's coo row/col are int32, so graphium's edge_index is int32, which torch
            # 2.13's CPU scatter_add_ (torch_scatter's sums in GatedGCN, PNA, pooling)
            # refuses: unpadded graphium fails on its own featurizer output. The reference
            # runs need int64 (FixedSizeLoader's default index dtype gives it anyway).
            g.edge_index = g.edge_index.long()
            out.append(g)
    ys = torch.cat([g.y for g in out])
    mean, std = ys.mean(), ys.std()
    for g in out:
        g.y = (g.y - mean) / std
    featurize.skipped = skipped
    return out


def config(layer_type: str, pooling: List[str], layer_kwargs: Dict = None, task_level="graph",
           virtual_node="none", dropout: float = 0.0) -> Dict:
    """A graphium architecture config (the ``architecture:`` block of its YAML files,
    graphium/config/zinc_default_multitask_pyg.yaml, shrunk), one task head ``tpsa``."""
    common = dict(activation="relu", last_activation="none", dropout=dropout,
                  normalization="batch_norm", last_normalization="batch_norm", residual_type="none")
    return {
        "architecture": {
            "model_type": "FullGraphMultiTaskNetwork",
            "pre_nn": dict(out_dim=32, hidden_dims=32, depth=1, **common),
            "pre_nn_edges": dict(out_dim=16, hidden_dims=16, depth=1, **common),
            "gnn": dict(out_dim=32, hidden_dims=32, depth=3, **{**common, "residual_type": "simple"},
                        virtual_node=virtual_node, layer_type=layer_type,
                        layer_kwargs=layer_kwargs or {}),
            "graph_output_nn": {
                task_level: dict(pooling=pooling, out_dim=32, hidden_dims=32, depth=1,
                                 **{**common, "last_normalization": "none"}),
            },
            "task_heads": {
                "tpsa": dict(task_level=task_level, out_dim=1, hidden_dims=[16], activation="relu",
                             last_activation="none", dropout=0.0, normalization="none",
                             residual_type="none"),
            },
        },
        "accelerator": {"type": "cpu"},
    }


#: graphium's PNA options of its ZINC configs, with every aggregator its pyg layer has
PNA_KWARGS = dict(aggregators=["mean", "max", "min", "std"],
                  scalers=["identity", "amplification", "attenuation"])

#: name -> :func:`config` arguments: GINE + sum pooling, GatedGCN + mean pooling,
#: PNA (with a sum virtual node, as graphium's ZINC config) + max pooling
CONFIGS = {
    "gine-sum": dict(layer_type="pyg:gine", pooling=["sum"]),
    "gated-gcn-mean": dict(layer_type="pyg:gated-gcn", pooling=["mean"]),
    "pna-max": dict(layer_type="pyg:pna-msgpass", pooling=["max"], layer_kwargs=PNA_KWARGS,
                    virtual_node="sum"),
}


def build(name: str, in_dims: Dict[str, int], seed: int = 0, **overrides) -> torch.nn.Module:
    """graphium's own ``load_architecture`` + ``model_class(**model_kwargs)``, seeded;
    ``overrides`` go to :func:`config` (e.g. ``dropout=0.1``)."""
    cfg = config(**{**CONFIGS[name], **overrides})
    model_class, model_kwargs = load_architecture(copy.deepcopy(cfg), in_dims=in_dims)
    torch.manual_seed(seed)
    return model_class(**model_kwargs)


def in_dims(ds: List[Data]) -> Dict[str, int]:
    return {"feat": ds[0].feat.size(-1), "edge_feat": ds[0].edge_feat.size(-1)}


def task_loss(output: Dict[str, torch.Tensor], batch) -> torch.Tensor:
    """The loss of the padded path: MSE of the ``tpsa`` head over real graphs
    (``graph_mask``), through graph_adapter's masked loss."""
    from graph_adapter.nn import masked_mse_loss

    return masked_mse_loss(output["tpsa"], batch.y, batch.graph_mask)


def unpadded(model: torch.nn.Module, graphs: List[Data]):
    """graphium as it runs without graph_adapter: ``model(Batch.from_data_list(graphs))``
    (a fresh batch each call: graphium's forward writes its features into the batch);
    returns ``(tpsa predictions [g, 1], MSE loss)``."""
    from torch_geometric.data import Batch

    pred = model(Batch.from_data_list(graphs))["tpsa"]
    y = torch.cat([g.y for g in graphs])
    return pred, torch.nn.functional.mse_loss(pred, y)
