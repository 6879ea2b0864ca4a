"""Training a temporal heterogeneous link predictor compiled: one compile in train mode
and one in eval mode over every batch, and the compiled wrapped model's loss,
gradients and scores equal eager PyG's on the unpadded batch (``loader.to_pyg``).

The graph, loaders and model are the benchmark's (benchmarks/bench_temporal_link_train.py),
smaller; the speed and accuracy over seeds are measured there, not here."""
from __future__ import annotations

import copy
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import graph_adapter as ga
from benchmarks.bench_temporal_link_train import (BUYS, LinkModel, auc, eager_loss, link_loaders,
                                                  temporal_graph, wrapped_loss)

NAME = "__".join(BUYS)


def _loaders(seed=0, batch_size=32, fanouts=(4, 2), purchases=600):
    data = temporal_graph(users=40, items=60, purchases=purchases, dim=8, seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return data, link_loaders(data, fanouts=fanouts, batch_size=batch_size, seed=seed)


def _grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters()}


def _assert_same_grads(ours, ref):
    for (name, p), (_, q) in zip(ours.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4, msg=name)


# a batch over its fitted budget is trimmed (with this warning): to_pyg gives the trimmed
# batch, so the comparison holds there too
TRIMMED = "ignore:.*were trimmed:UserWarning"


@pytest.mark.filterwarnings(TRIMMED)
def test_compiled_training_one_compile_per_mode_and_equal_to_eager_pyg():
    data, (train, evaluate) = _loaders()
    torch.manual_seed(0)
    plain = LinkModel(8, 16)
    ours = copy.deepcopy(plain)
    # eval batches have a budget of their own (later links: more history): a new
    # signature, compiled once in eval mode
    compiled = ga.compile(ga.ipu_wrap(ours, loss_fn=wrapped_loss), backend="aot_eager",
                          allow_new_shapes=True)
    opt_o = torch.optim.SGD(ours.parameters(), lr=0.1)
    opt_p = torch.optim.SGD(plain.parameters(), lr=0.1)
    steps = 0
    for _ in range(2):  # two epochs: reshuffled batches, new negatives, one program
        for flat in train:
            batch = train.to_pyg(flat)
            assert int(flat[f"{NAME}/link_mask"].sum()) == batch[BUYS].edge_label.numel()
            opt_o.zero_grad()
            opt_p.zero_grad()
            loss = compiled(flat)["loss"]
            loss.backward()
            ref = eager_loss(plain(batch), batch)
            ref.backward()
            torch.testing.assert_close(loss, ref, atol=1e-5, rtol=1e-4)
            _assert_same_grads(ours, plain)
            opt_o.step()
            opt_p.step()
            steps += 1
    assert steps > 2 and compiled.compile_count == 1
    compiled.eval()
    plain.eval()
    scores, labels, ref_scores, ref_labels = [], [], [], []
    with torch.no_grad():
        for flat in evaluate:
            batch = evaluate.to_pyg(flat)
            mask = flat[f"{NAME}/link_mask"]
            out = compiled(flat)["output"]
            ref = plain(batch)
            # the real slots first, in the unpadded batch's order
            torch.testing.assert_close(out[mask], ref, atol=1e-4, rtol=1e-4)
            scores.append(out[mask])
            labels.append(flat[f"{NAME}/edge_label"][mask])
            ref_scores.append(ref)
            ref_labels.append(batch[BUYS].edge_label)
    assert compiled.compile_count == 2  # one more, for eval mode, over every eval batch
    assert torch.equal(torch.cat(labels), torch.cat(ref_labels))
    a = auc(torch.cat(scores), torch.cat(labels))
    assert abs(a - auc(torch.cat(ref_scores), torch.cat(ref_labels))) < 1e-6


@pytest.mark.filterwarnings(TRIMMED)
@given(seed=st.integers(0, 10 ** 6), batch_size=st.integers(1, 24),
       fanouts=st.lists(st.integers(1, 4), min_size=1, max_size=2))
@settings(max_examples=6, deadline=None)
@pytest.mark.extended  # (the one-compile test above holds the main suite's case)
def test_padded_loss_and_gradients_equal_the_unpadded_batch(seed, batch_size, fanouts):
    """Wrapped (padded, eager) vs plain on ``to_pyg``: any graph, batch size, fanouts,
    every batch of an epoch, the partial last one and its padding slots included."""
    _, (train, _) = _loaders(seed, batch_size, tuple(fanouts), purchases=150)
    torch.manual_seed(seed)
    plain = LinkModel(8, 8)
    wrapped = ga.ipu_wrap(copy.deepcopy(plain), loss_fn=wrapped_loss)
    for flat in train:
        batch = train.to_pyg(flat)
        wrapped.zero_grad()
        plain.zero_grad()
        loss = wrapped(flat)["loss"]
        loss.backward()
        ref = eager_loss(plain(batch), batch)
        ref.backward()
        torch.testing.assert_close(loss, ref, atol=1e-5, rtol=1e-4)
        _assert_same_grads(wrapped.model, plain)


def test_auc_is_the_probability_a_positive_outranks_a_negative():
    g = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 5, (40,), generator=g).float()  # ties on purpose
    labels = torch.rand(40, generator=g) < 0.5
    pos, neg = scores[labels], scores[~labels]
    pairs = (pos[:, None] > neg[None]).double() + 0.5 * (pos[:, None] == neg[None]).double()
    assert abs(auc(scores, labels) - float(pairs.mean())) < 1e-12
