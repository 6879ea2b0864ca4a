"""The CPU emulation of poptorch's execution (backend "ipu-emulator")."""
import copy

import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch import nn

from graph_adapter.ipu import EmulatorError, IPUOptions, collect_outputs, compile_ipu


class FlatModel(nn.Module):
    """Takes a flat dict whose tensors have a leading micro-batch dim of 1 (or none)."""

    def __init__(self, squeeze=True):
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
        self.squeeze = squeeze
        self.seen = []

    def forward(self, batch):
        self.seen.append({k: (v.dtype, tuple(v.shape)) for k, v in batch.items()})
        x, y = batch["x"], batch["y"]
        if self.squeeze:
            x, y = x.squeeze(0), y.squeeze(0)
        out = self.lin(x).squeeze(-1)
        return {"output": out, "loss": ((out - y) ** 2).mean()}


def host_batch(F, n=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(F, n, 4, generator=g), "y": torch.randn(F, n, generator=g)}


@settings(deadline=None)
@given(d=st.integers(1, 3), r=st.integers(1, 2), a=st.integers(1, 3), calls=st.integers(1, 2),
       momentum=st.sampled_from([0.0, 0.9]))
def test_training_equals_plain_pytorch_loop(d, r, a, calls, momentum):
    options = IPUOptions(d, r, a)
    emu_model, ref_model = FlatModel(), FlatModel()
    ref_model.load_state_dict(emu_model.state_dict())
    opt = torch.optim.SGD(emu_model.parameters(), lr=0.05, momentum=momentum)
    emu = compile_ipu(emu_model, "ipu-emulator", options, optimizer=opt)
    batches = [host_batch(options.micro_batches, seed=s) for s in range(calls)]
    out_losses = []
    for b in batches:
        out = emu(b)
        assert out["loss"].shape == ((options.micro_batches,) if options.micro_batches > 1 else ())
        out_losses.append(out["loss"].reshape(-1))
    # reference with the same optimizer
    ref_opt = torch.optim.SGD(ref_model.parameters(), lr=0.05, momentum=momentum)
    per_step = r * a
    ref_losses = []
    for host in batches:
        micro = [{k: v[i:i + 1] for k, v in host.items()} for i in range(options.micro_batches)]
        for s in range(d):
            ref_opt.zero_grad()
            step = [ref_model(mb)["loss"] for mb in micro[s * per_step:(s + 1) * per_step]]
            torch.stack(step).mean().backward()
            ref_opt.step()
            ref_losses += [l.detach() for l in step]
    for (name, p), q in zip(emu_model.named_parameters(), ref_model.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=name)
    torch.testing.assert_close(torch.cat(out_losses), torch.stack(ref_losses), rtol=1e-5, atol=1e-6)
    assert emu.steps == d * calls


def test_accumulation_with_mean_equals_one_big_batch():
    # poptorch's own test (batching_test.test_gradient_accumulation): with Mean
    # reduction, A=2 over two halves equals A=1 over the whole batch.
    torch.manual_seed(0)
    m1, m2 = FlatModel(squeeze=False), FlatModel(squeeze=False)
    m2.load_state_dict(m1.state_dict())
    x, y = torch.randn(4, 4), torch.randn(4)
    e1 = compile_ipu(m1, "ipu-emulator", IPUOptions(), optimizer=torch.optim.SGD(m1.parameters(), lr=0.1))
    e2 = compile_ipu(m2, "ipu-emulator", IPUOptions(gradient_accumulation=2),
                     optimizer=torch.optim.SGD(m2.parameters(), lr=0.1))
    for _ in range(5):
        e1({"x": x, "y": y})
        e2({"x": x, "y": y})
    for p, q in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(p, q)


def test_model_sees_leading_dim_one_and_narrowed_dtypes():
    model = FlatModel()
    emu = compile_ipu(model, "ipu-emulator", IPUOptions(device_iterations=3))
    b = host_batch(3)
    b["x"] = b["x"].double()
    b["idx"] = torch.arange(6).reshape(3, 2)
    emu(b)
    assert len(model.seen) == 3
    assert model.seen[0]["x"] == (torch.float32, (1, 5, 4))
    # int64 stays int64 on CPU by default (CPU scatter kernels need it) ...
    assert model.seen[0]["idx"] == (torch.int64, (1, 2))
    # ... and becomes int32, as on the IPU, with narrow_ints=True.
    model.seen.clear()
    compile_ipu(model, "ipu-emulator", IPUOptions(device_iterations=3), narrow_ints=True)(b)
    assert model.seen[0]["idx"] == (torch.int32, (1, 2))


def test_int64_out_of_range_warns():
    model = FlatModel()
    emu = compile_ipu(model, "ipu-emulator", IPUOptions())
    b = host_batch(1)
    b["big"] = torch.tensor([2**40])
    with pytest.warns(RuntimeWarning, match="int32"):
        emu(b)


def test_inference_output_modes_values():
    class Ident(nn.Module):
        def forward(self, batch):
            return {"output": batch["x"] * 1.0, "scalar": batch["x"].sum()}

    x = torch.arange(4 * 2 * 3, dtype=torch.float32).reshape(4, 2, 3)
    per_mb = [x[i:i + 1] for i in range(4)]

    out = compile_ipu(Ident(), "ipu-emulator", IPUOptions(4))({"x": x})
    torch.testing.assert_close(out["output"], x)  # [4*1, 2, 3]
    assert out["scalar"].shape == (4,)

    out = compile_ipu(Ident(), "ipu-emulator", IPUOptions(4, output_mode="final"))({"x": x})
    torch.testing.assert_close(out["output"], per_mb[-1])
    assert out["scalar"].shape == ()

    out = compile_ipu(Ident(), "ipu-emulator", IPUOptions(4, output_mode="sum"))({"x": x})
    torch.testing.assert_close(out["output"], x.sum(0, keepdim=True))
    torch.testing.assert_close(out["scalar"], x.sum())

    out = compile_ipu(Ident(), "ipu-emulator",
                      IPUOptions(4, output_mode="every_n", output_return_period=2))({"x": x})
    torch.testing.assert_close(out["output"], torch.cat([per_mb[1], per_mb[3]]))
    assert out["scalar"].shape == (2,)


def test_replicas_final_and_sum_return_one_row_per_replica():
    class Ident(nn.Module):
        def forward(self, batch):
            return {"output": batch["x"] * 1.0, "loss": batch["x"].sum() * 0.0 + self.w.sum()}

        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.zeros(1))

    D, A, R = 2, 3, 2
    F = D * A * R
    x = torch.arange(F, dtype=torch.float32).reshape(F, 1)
    o = dict(device_iterations=D, gradient_accumulation=A, replication_factor=R)
    final = compile_ipu(Ident(), "ipu-emulator", IPUOptions(**o, output_mode="final"), training=True)({"x": x})
    # layout [D, A, R]: the final (d=1, a=2) micro-batch of replica r is index 10 + r
    torch.testing.assert_close(final["output"], torch.tensor([[10.0], [11.0]]))
    assert final["loss"].shape == (R,)
    summed = compile_ipu(Ident(), "ipu-emulator", IPUOptions(**o, output_mode="sum"), training=True)({"x": x})
    torch.testing.assert_close(summed["output"], torch.tensor([[0.0 + 2 + 4 + 6 + 8 + 10], [1.0 + 3 + 5 + 7 + 9 + 11]]))
    everyn = compile_ipu(Ident(), "ipu-emulator",
                         IPUOptions(**o, output_mode="every_n", output_return_period=2), training=True)({"x": x})
    # (D / N) * A * R rows: every 2nd device iteration, all its accumulation steps and replicas
    torch.testing.assert_close(everyn["output"], x[6:])


@settings(deadline=None)
@given(d=st.integers(1, 4), r=st.integers(1, 3), a=st.integers(1, 3),
       mode=st.sampled_from(["all", "final", "sum", "every_n"]), rows=st.integers(1, 3))
def test_output_shapes(d, r, a, mode, rows):
    period = d if mode == "every_n" else 1
    o = IPUOptions(d, r, a, output_mode=mode, output_return_period=period)
    F = o.micro_batches
    outs = [{"v": torch.full((rows, 2), float(i)), "s": torch.tensor(float(i))} for i in range(F)]
    got = collect_outputs(outs, o)
    k = {"all": F, "every_n": (d // period) * a * r, "final": r, "sum": r}[mode]
    assert got["v"].shape == (k * rows, 2)
    assert got["s"].shape == (() if k == 1 else (k,))
    if mode == "all":
        assert got["s"].tolist() == (list(map(float, range(F))) if F > 1 else 0.0)
    if mode == "sum":
        total = got["s"].sum() if k > 1 else got["s"]
        assert float(total) == sum(range(F))


def test_input_checks_with_poptorch_messages():
    emu = compile_ipu(FlatModel(), "ipu-emulator", IPUOptions(2))
    emu(host_batch(2))
    assert emu.isCompiled()
    b = host_batch(2)
    del b["y"]
    with pytest.raises(EmulatorError, match=r"Missing arguments: y\."):
        emu(b)
    b = host_batch(2)
    b["z"] = torch.zeros(2)
    with pytest.raises(EmulatorError, match=r"Unexpected arguments: z\."):
        emu(b)
    b = host_batch(2)
    b["x"] = b["x"].double()
    with pytest.raises(EmulatorError, match="Data type mismatch for batch\\[x\\]"):
        emu(b)
    with pytest.raises(EmulatorError, match="Shape mismatch for batch\\[x\\]"):
        emu(host_batch(2, n=6))
    emu.destroy()
    emu(host_batch(2, n=6))  # recompiled for the new shapes


def test_dim0_must_divide_by_F():
    # poptorch asserts in _poplar_executor._narrow_tensor, before it compiles.
    emu = compile_ipu(FlatModel(), "ipu-emulator", IPUOptions(2, 1, 2), training=True)
    with pytest.raises(AssertionError, match=r"Invalid batch dimension: In the input torch.Size"
                       r"\(\[6, 5, 4\]\), the batch dimension \(6\) must be a multiple of "
                       r"Options.deviceIterations\(2\).*= 4 .*batch\[x\]"):
        emu(host_batch(6))
    b = host_batch(4)
    b["t"] = torch.tensor(1.0)
    with pytest.raises(EmulatorError, match=r"batch dimension \(1\).*0-d"):
        compile_ipu(FlatModel(), "ipu-emulator", IPUOptions(4))(b)


def test_failed_first_call_compiles_nothing():
    model = FlatModel()
    emu = compile_ipu(model, "ipu-emulator", IPUOptions(2), training=True)
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(EmulatorError, match="Invalid batch dimension"):
        emu(host_batch(3))
    assert not emu.isCompiled() and emu.compile_count == 0 and model.seen == []
    # The next call compiles for its own (good) shapes, not the failed ones.
    emu(host_batch(2, n=7))
    assert emu.isCompiled() and emu.compile_count == 1
    # ... and a later wrong dim 0 is a shape mismatch, as poptorch's ArgsParser reports it.
    with pytest.raises(EmulatorError, match=r"Shape mismatch for batch\[x\]: expected "
                       r"torch.Size\(\[2, 7, 4\]\) but got torch.Size\(\[3, 7, 4\]\)"):
        emu(host_batch(3, n=7))
    assert not any(torch.equal(v, before[k]) for k, v in model.state_dict().items()
                   if v.is_floating_point())  # one good call trained


def test_failed_first_forward_compiles_nothing():
    class Fails(FlatModel):
        def forward(self, batch):
            raise RuntimeError("boom")

    emu = compile_ipu(Fails(), "ipu-emulator", IPUOptions(2))
    with pytest.raises(RuntimeError, match="boom"):
        emu(host_batch(2))
    assert not emu.isCompiled() and emu.compile_count == 0


def test_type_mismatch_message_as_poptorch_prints_it():
    emu = compile_ipu(FlatModel(), "ipu-emulator", IPUOptions())
    emu(host_batch(1))
    b = host_batch(1)
    b["y"] = [b["y"]]
    # python/_args_parser.py: f"Type mismatch for {name}: expected {ctype} but got {itype}."
    with pytest.raises(EmulatorError, match=r"^Type mismatch for batch\[y\]: expected "
                       r"<class 'torch.Tensor'> but got <class 'list'>\.\nThis error occurred "
                       r"because the inputs passed at runtime don't match"):
        emu(b)


def test_outputs_narrowed_as_poptorch_returns_them():
    class Wide(nn.Module):
        def forward(self, batch):
            return {"i": batch["x"].sum(-1).long(), "f": batch["x"].double(), "h": batch["x"].half(),
                    "b": batch["x"] > 0}

    out = compile_ipu(Wide(), "ipu-emulator", IPUOptions(2))(host_batch(2))
    assert out["i"].dtype == torch.int32 and out["f"].dtype == torch.float32
    assert out["h"].dtype == torch.float16 and out["b"].dtype == torch.bool


def test_never_calls_train_or_eval_on_the_model():
    for training in (True, False):
        model = FlatModel()
        model.train(not training)  # the opposite of the poptorch model's kind
        calls = []
        model.train = lambda mode=True, _c=calls: _c.append(mode)  # type: ignore[method-assign]
        emu = compile_ipu(model, "ipu-emulator", IPUOptions(2, 1, 1), training=training)
        emu(host_batch(2))
        assert calls == [] and model.training is (not training)


def test_micro_batch_without_graphs_takes_no_step_and_keeps_statistics():
    class BN(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.bn = nn.Linear(4, 1), nn.BatchNorm1d(4)

        def forward(self, batch):
            x = self.bn(batch["x"].squeeze(0))
            loss = (self.lin(x).squeeze(-1) * batch["graph_mask"].squeeze(0)).sum()
            return {"loss": loss}

    def batch(real):
        b = host_batch(2)
        return {"x": b["x"], "graph_mask": torch.tensor(real).reshape(2, 1).expand(2, 5)}

    model = BN()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    emu = compile_ipu(model, "ipu-emulator", IPUOptions(device_iterations=2), optimizer=opt)
    emu(batch([True, True]))  # momentum is non-zero from here on
    state = copy.deepcopy(model.state_dict())
    emu(batch([False, False]))  # no real graph: no step, no statistics update
    assert emu.steps == 2 and emu.skipped_micro_batches == 2
    for k, v in model.state_dict().items():
        assert torch.equal(v, state[k]), k
    emu(batch([True, False]))  # one real micro-batch: one step, its statistics only
    assert emu.steps == 3 and emu.skipped_micro_batches == 3
    assert int(model.bn.num_batches_tracked) == int(state["bn.num_batches_tracked"]) + 1


def test_half_inputs_run_with_finite_masked_loss():
    import graph_adapter.nn.wrap as wrap
    import graph_adapter.batching.loader as loader_mod
    from graph_adapter.batching import Budget
    from graph_adapter.nn import masked_loss

    ds = _graphs()
    opts = IPUOptions(2, 1, 2, half_inputs=True)
    loader = loader_mod.FixedSizeLoader(ds, Budget.tight(ds, 3), micro_batches=opts.micro_batches)
    wrapped = wrap.ipu_wrap(_Net(), loss_fn=masked_loss("mse")).half()
    seen = []
    wrapped.register_forward_pre_hook(lambda m, a: seen.append(a[0]["x"].dtype))
    emu = compile_ipu(wrapped, "ipu-emulator", opts,
                      optimizer=torch.optim.SGD(wrapped.parameters(), lr=0.01))
    for host in loader:
        assert host["x"].dtype == torch.float32  # the loader's dtype; the cast is the emulator's
        out = emu(host)
        assert out["loss"].dtype == torch.float16 and bool(torch.isfinite(out["loss"]).all())
    assert seen and set(seen) == {torch.float16}
    assert all(bool(torch.isfinite(p).all()) for p in wrapped.parameters())


def test_training_requires_scalar_loss_and_default_optimizer():
    class NoLoss(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 1)

        def forward(self, batch):
            return {"output": self.lin(batch["x"])}

    with pytest.raises(TypeError, match="loss"):
        compile_ipu(NoLoss(), "ipu-emulator", IPUOptions(), training=True)(host_batch(1))
    emu = compile_ipu(FlatModel(), "ipu-emulator", IPUOptions(), training=True)
    assert isinstance(emu.optimizer, torch.optim.SGD) and emu.optimizer.defaults["lr"] == 0.01
    with pytest.raises(ValueError, match="gradient_accumulation"):
        compile_ipu(FlatModel(), "ipu-emulator", IPUOptions(gradient_accumulation=2))


def test_inference_does_not_touch_parameters():
    model = FlatModel()
    before = copy.deepcopy(model.state_dict())
    out = compile_ipu(model, "ipu-emulator", IPUOptions(3))(host_batch(3))
    assert not out["output"].requires_grad
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k])


def test_allow_new_shapes_recompiles():
    emu = compile_ipu(FlatModel(), "ipu-emulator", IPUOptions(2), allow_new_shapes=True)
    emu(host_batch(2))
    emu(host_batch(2, n=7))
    emu(host_batch(2, n=7))
    assert emu.compiles == 2


# ---- with the other modules: ipu_wrap + FixedSizeLoader + graph_adapter.compile ----------
def _graphs(n=16, seed=0):
    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        k = int(torch.randint(3, 8, (1,), generator=g))
        out.append(Data(x=torch.randn(k, 4, generator=g),
                        edge_index=torch.randint(0, k, (2, 2 * k), generator=g),
                        y=torch.randn(1, generator=g)))
    return out


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        from torch_geometric.nn import GIN

        torch.manual_seed(0)
        self.gin = GIN(4, 16, 2, out_channels=1)

    def forward(self, data):
        from torch_geometric.nn import global_add_pool

        x = self.gin(data.x, data.edge_index)
        return global_add_pool(x, data.batch, size=data.num_graphs).squeeze(-1)


def test_ipu_wrap_loader_emulator_equals_plain_loop():
    import graph_adapter.nn.wrap as wrap
    import graph_adapter.batching.loader as loader_mod
    from graph_adapter.batching import Budget
    from graph_adapter.nn import masked_loss

    ds = _graphs()
    opts = IPUOptions(2, 1, 2)
    loader = loader_mod.FixedSizeLoader(ds, Budget.tight(ds, 4), micro_batches=opts.micro_batches)
    w_emu = wrap.ipu_wrap(_Net(), loss_fn=masked_loss("mse"))
    w_ref = copy.deepcopy(w_emu)
    from graph_adapter.backends import compile as ga_compile

    opt = torch.optim.SGD(w_emu.parameters(), lr=0.01)
    emu = ga_compile(w_emu, backend="ipu-emulator", options=opts, optimizer=opt)
    ref_opt = torch.optim.SGD(w_ref.parameters(), lr=0.01)
    batches = list(loader)
    for host in batches:
        out = emu(host)
        F = opts.micro_batches
        G = host["graph_mask"].size(-1)
        assert out["output"].shape == (F * G,) and out["loss"].shape == (F,)
        unpadded = wrap.unpad(out, host)
        assert len(unpadded) == F
        assert [u["output"].numel() for u in unpadded] == host["graph_mask"].sum(-1).tolist()
        per_step = opts.replicas_times_accumulation
        for d in range(opts.device_iterations):
            ref_opt.zero_grad()
            losses = [w_ref({k: v[i:i + 1] for k, v in host.items()})["loss"]
                      for i in range(d * per_step, (d + 1) * per_step)]
            torch.stack(losses).mean().backward()
            ref_opt.step()
    for (name, p), q in zip(w_emu.named_parameters(), w_ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=name)


def test_train_eval_switch_one_object():
    """One emulator for both modes: per-mode signatures, the default optimizer, A > 1 only in training."""
    model = FlatModel()
    emu = compile_ipu(model, "ipu-emulator", IPUOptions(2))
    assert not emu.training and emu.steps_optimizer
    emu(host_batch(2))
    emu.train()
    assert emu.training and model.training and isinstance(emu.optimizer, torch.optim.SGD)
    emu(host_batch(2, n=7))  # training has its own signature (poptorch: its own model)
    assert emu.steps == 2 and emu.compile_count == 2  # D = 2 steps a call
    emu.eval()
    assert not model.training
    with pytest.raises(EmulatorError, match="Shape mismatch"):
        emu(host_batch(2, n=7))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    emu.set_optimizer(opt)
    assert emu.optimizer is opt
    acc = compile_ipu(FlatModel(), "ipu-emulator", IPUOptions(1, 1, 2), training=True)
    acc.eval()
    with pytest.raises(ValueError, match="gradient_accumulation"):
        acc(host_batch(2))


def test_input_helpers_walk_containers_only():
    from torch_geometric.data import Data

    from graph_adapter.ipu import host_micro_batch, map_tensors, named_tensors

    d = Data(x=torch.zeros(2, 3))
    obj = ({"x": torch.zeros(4, 2), "n": [torch.ones(4), 3]}, d)
    assert [n for n, _ in named_tensors(obj, "batch")] == ["batch[0][x]", "batch[0][n][0]"]
    doubled = map_tensors(obj, lambda t: t + 1)
    assert doubled[1] is d and doubled[0]["n"][1] == 3 and float(doubled[0]["x"].sum()) == 8
    host = {"x": torch.arange(8.0).reshape(4, 2), "n": [torch.ones(4), 3]}
    mb = host_micro_batch(host, 2, 1)  # rows [2, 4) of dim 0
    assert torch.equal(mb["x"], host["x"][2:]) and mb["n"][0].shape == (2,) and mb["n"][1] == 3
