"""Hand-made padded flat dicts (docs/dev/FORMAT.md), independent of the loader."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.data import Batch, Data


def pad_batch(data_list: List[Data], num_nodes: int, num_edges: int, num_graphs: int,
              micro_batch: bool = False, node_keys=("x", "pos", "node_y"),
              edge_keys=("edge_attr", "edge_weight")) -> Dict[str, Tensor]:
    """Pad ``Batch.from_data_list(data_list)`` to N nodes, E edges, G graph slots."""
    b = Batch.from_data_list(data_list)
    n, e, g = b.num_nodes, b.edge_index.size(1), b.num_graphs
    N, E, G = num_nodes, num_edges, num_graphs
    assert N > n and E >= e and G > g, (N, n, E, e, G, g)
    flat: Dict[str, Tensor] = {}
    for key in b.keys():
        v = b[key]
        if key in ("batch", "ptr") or not isinstance(v, Tensor):
            continue
        if key == "edge_index":
            pad = torch.full((2, E - e), N - 1, dtype=v.dtype)
            flat[key] = torch.cat([v, pad], dim=1)
        elif key in node_keys:
            flat[key] = torch.cat([v, v.new_zeros((N - n,) + v.shape[1:])])
        elif key in edge_keys:
            flat[key] = torch.cat([v, v.new_zeros((E - e,) + v.shape[1:])])
        else:  # graph-level
            fill = float("nan") if v.is_floating_point() else 0
            flat[key] = torch.cat([v, v.new_full((G - g,) + v.shape[1:], fill)])
    # padding nodes: one per padding graph slot while they last, the rest in G - 1
    counts = torch.tensor(padding_slot_counts(N, n, G, g))
    flat["batch"] = torch.cat([b.batch, torch.repeat_interleave(torch.arange(g, G), counts)])
    flat["ptr"] = torch.cat([b.ptr, n + counts.cumsum(0)])
    flat["node_mask"] = torch.arange(N) < n
    flat["edge_mask"] = torch.arange(E) < e
    flat["graph_mask"] = torch.arange(G) < g
    flat = dict(sorted(flat.items()))
    if micro_batch:
        flat = {k: v.unsqueeze(0) for k, v in flat.items()}
    return flat


def random_graphs(gen: torch.Generator, num: int, features: int = 4, max_nodes: int = 6,
                  self_loops: bool = True, edge_dim: Optional[int] = None) -> List[Data]:
    out = []
    for _ in range(num):
        n = int(torch.randint(1, max_nodes + 1, (1,), generator=gen))
        m = int(torch.randint(0, 2 * n + 1, (1,), generator=gen))
        ei = torch.randint(0, n, (2, m), generator=gen)
        if not self_loops:
            ei = ei[:, ei[0] != ei[1]]
        d = Data(x=torch.randn(n, features, generator=gen), edge_index=ei,
                 y=torch.randn(1, generator=gen))
        if edge_dim is not None:
            d.edge_attr = torch.randn(ei.size(1), edge_dim, generator=gen)
        out.append(d)
    return out


def padding_slot_counts(N: int, n: int, G: int, g: int) -> List[int]:
    """Nodes of padding slots ``g .. G-1`` (docs/dev/FORMAT.md): one padding
    node each while they last, the rest in the last slot ``G - 1``."""
    pad, slots = N - n, G - g
    ones = max(0, min(slots - 1, pad - 1))
    return [1] * ones + [0] * (slots - 1 - ones) + [pad - ones]


def check_padding_slots(batch: Tensor, ptr: Tensor, N: int, n: int, G: int, g: int) -> None:
    """``batch`` / ``ptr`` of one node type follow the padding-slot rule; no
    padding slot is empty when there are enough padding nodes."""
    want = padding_slot_counts(N, n, G, g)
    assert ptr.diff()[g:].tolist() == want, (ptr.tolist(), want)
    assert int(ptr[g]) == n and int(ptr[G]) == N
    assert int(batch.max()) == G - 1 and int(batch[N - 1]) == G - 1
    assert torch.equal(batch.long(), torch.repeat_interleave(torch.arange(G), ptr.diff().long()))
    if N - n >= G - g:
        assert min(want) >= 1, "a padding graph slot is empty"


def untied(nodes: int, edges: int, graphs: int, grow: str = "edges") -> Tuple[int, int, int]:
    """``(N, E, G)`` with a row count grown by one where two would be equal, as
    ``Budget(...)`` requires (a row count names its level; docs/dev/FORMAT.md):
    ``E`` first when it ties, then ``grow`` (``"nodes"`` or ``"graphs"``) for an
    ``N == G`` tie.  One more padding row changes no result."""
    N, E, G = nodes, edges, graphs
    while len({N, E, G}) < 3:
        if E in (N, G):
            E += 1
        elif grow == "graphs":
            G += 1
        else:
            N += 1
    return N, E, G


def molecule_like_graphs(num: int = 8, seed: int = 0) -> List[Data]:
    """Random graphs with the demo's categorical columns (9 atom, 3 bond; codes 0/1)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(num):
        n = int(torch.randint(2, 7, (1,), generator=g))
        m = int(torch.randint(1, 2 * n + 1, (1,), generator=g))
        out.append(Data(x=torch.randint(0, 2, (n, 9), generator=g),
                        edge_index=torch.randint(0, n, (2, m), generator=g),
                        edge_attr=torch.randint(0, 2, (m, 3), generator=g),
                        y=torch.randn(1, generator=g)))
    return out
