"""The learner's device paths: precision (bf16 autocast), torch.compile, batches moved to the
device (pinned, non_blocking, one ahead) and update metrics read once per logged row.

The CUDA tests run where a CUDA GPU is; elsewhere they skip, saying so. The CPU tests check the
same code on the CPU (bf16 where the CPU has AMX or AVX512-BF16)."""

from __future__ import annotations

import io
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from test_agent import OBS_SHAPE, make_agent, make_batch

import ellm.agent.precision as precision_module
from ellm.agent.dqn import mean_metrics, read_metrics
from ellm.agent.precision import bf16_support, check_precision
from ellm.embed import SentenceEmbedder
from ellm.errors import ConfigError
from ellm.replay.loader import DEVICE_FIELDS, DeviceBatches
from ellm.replay.sampling import Batch
from ellm.run.config import validate

ROOT = Path(__file__).resolve().parents[1]
CUDA = torch.device("cuda")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
needs_cpu_bf16 = pytest.mark.skipif(
    bf16_support(torch.device("cpu")) is None,
    reason="this CPU has neither AMX nor AVX512-BF16 (precision=bf16 is refused on it)")


@pytest.fixture(scope="module")
def embedder() -> SentenceEmbedder:
    return SentenceEmbedder()


def replay_batch(seed: int, size: int = 8) -> Batch:
    """A replay Batch as the loader yields it (torch tensors on the host)."""
    b = make_batch(size, seed=seed)
    return Batch(obs=b.obs, action=b.action, reward=b.reward, discount=b.discount,
                 next_obs=b.next_obs, text_obs=b.text_obs, next_text_obs=b.next_text_obs,
                 goal=b.goal, next_goal=b.next_goal, n_steps=torch.full((size,), 3),
                 window_text_obs=b.text_obs[:, None].repeat(1, 4))


# ----------------------------------------------------------------------------- precision
def test_precision_check_names_the_key_and_the_missing_cpu_flags(monkeypatch) -> None:
    cpu = torch.device("cpu")
    check_precision("fp32", cpu)
    with pytest.raises(ConfigError, match=r"precision='fp16' is invalid: expected fp32 or bf16"):
        check_precision("fp16", cpu)
    monkeypatch.setattr(precision_module, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    with pytest.raises(ConfigError, match=r"precision=bf16 on device=cpu: this CPU has none of "
                                          r"the flags amx_bf16, avx512_bf16"):
        check_precision("bf16", cpu)
    monkeypatch.setattr(precision_module, "cpu_flags", lambda: frozenset({"avx512_bf16"}))
    check_precision("bf16", cpu)
    assert bf16_support(cpu) == "CPU with avx512_bf16"


def test_cpu_flags_read_from_cpuinfo(tmp_path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse avx512f amx_bf16 amx_tile\n")
    assert {"amx_bf16", "avx512f"} <= precision_module.cpu_flags.__wrapped__(str(info))
    assert precision_module.cpu_flags.__wrapped__(str(tmp_path / "missing")) == frozenset()


def test_bf16_without_hardware_support_stops_the_config_before_training(monkeypatch) -> None:
    monkeypatch.setattr(precision_module, "cpu_flags", lambda: frozenset())
    with initialize_config_dir(str(ROOT), version_base="1.3"):
        cfg = compose("config", overrides=["device=cpu", "precision=bf16"])
        with pytest.raises(ConfigError, match="precision=bf16 on device=cpu"):
            validate(cfg)
        with pytest.raises(ConfigError, match="precision"):
            validate(compose("config", overrides=["precision=half"]))
        with pytest.raises(ConfigError, match="compile='maybe' is invalid: expected true, false, "
                                              "reduce-overhead or graph"):
            validate(compose("config", overrides=["compile=maybe"]))
        validate(compose("config", overrides=["device=cpu", "compile=reduce-overhead"]))
        with pytest.raises(ConfigError, match="compile=graph .* needs a CUDA device, not "
                                              "device=cpu; use compile=true on a CPU"):
            validate(compose("config", overrides=["device=cpu", "compile=graph"]))


def test_graph_is_refused_on_a_cpu_learner(embedder) -> None:
    with pytest.raises(ConfigError, match="compile=graph .* needs a CUDA device"):
        make_agent(embedder, use_goal=True, compile="graph")
    with pytest.raises(ConfigError, match="compile='graphs' is invalid"):
        make_agent(embedder, use_goal=True, compile="graphs")


def _loss_after(agent, batch, updates: int = 1) -> list[float]:
    return [read_metrics(agent.update(batch, step=4 * (i + 1)))["loss"] for i in range(updates)]


@needs_cpu_bf16
@pytest.mark.slow
def test_bf16_update_on_cpu_learns_like_fp32_and_keeps_fp32_weights(embedder) -> None:
    batch = make_batch(16, seed=3)
    fp32 = make_agent(embedder, use_image=True, use_goal=True)
    bf16 = make_agent(embedder, use_image=True, use_goal=True, precision="bf16")
    first32, first16 = _loss_after(fp32, batch)[0], _loss_after(bf16, batch)[0]
    assert first16 == pytest.approx(first32, rel=0.05)  # same weights, same batch
    assert all(p.dtype == torch.float32 for p in bf16.online.parameters())
    assert all(s["exp_avg"].dtype == torch.float32 for s in bf16.optimizer.state.values())
    losses = _loss_after(bf16, batch, updates=40)
    assert losses[-1] < 0.5 * losses[0]  # it fits the batch


def test_acting_stays_fp32_with_bf16(embedder, monkeypatch) -> None:
    monkeypatch.setattr(precision_module, "cpu_flags", lambda: frozenset({"amx_bf16"}))
    agent = make_agent(embedder, use_goal=True, precision="bf16")
    obs = {"frames": np.zeros(OBS_SHAPE, np.uint8), "text_obs": "", "goal": "chop tree"}
    assert agent.q_values(obs).dtype == torch.float32


@pytest.mark.parametrize("mode", [True, "reduce-overhead"])  # CUDA graphs only on CUDA
@pytest.mark.slow
def test_compiled_update_matches_eager(embedder, mode) -> None:
    batch = make_batch(8, seed=5)
    eager = make_agent(embedder, use_goal=True)
    compiled = make_agent(embedder, use_goal=True, compile=mode)
    assert compiled._loss is not compiled._td_loss
    assert _loss_after(compiled, batch, 3) == pytest.approx(_loss_after(eager, batch, 3),
                                                             rel=1e-4)
    # the module and its checkpoint are the same as without compile
    assert compiled.state_dict()["online"].keys() == eager.state_dict()["online"].keys()


# ----------------------------------------------------------------------------- metrics
def test_mean_metrics_reads_tensors_as_the_floats_they_hold() -> None:
    values = [torch.tensor(v, dtype=torch.float32) for v in (0.1, 0.2, 0.7, 1e-3)]
    floats = [v.item() for v in values]
    assert mean_metrics({"loss": values, "n": [1, 2]}) == {
        "loss": float(np.mean(floats)), "n": 1.5}


def test_update_metrics_are_read_only_when_logged(embedder) -> None:
    agent = make_agent(embedder, use_goal=True)
    metrics = agent.update(make_batch(8), step=4)
    assert all(isinstance(v, torch.Tensor) and v.device.type == "cpu" for v in metrics.values())
    assert set(read_metrics(metrics)) == set(metrics)


# ----------------------------------------------------------------------------- batches
def test_device_batches_pass_through_on_the_cpu() -> None:
    batches = [replay_batch(0), replay_batch(1)]
    out = list(DeviceBatches(iter(batches), torch.device("cpu")))
    assert len(out) == 2 and all(a is b for a, b in zip(out, batches))


@needs_cuda
def test_device_batches_are_pinned_copies_one_ahead_on_cuda() -> None:
    source = [replay_batch(i) for i in range(4)]
    pulled: list[int] = []

    def batches():
        for i, b in enumerate(source):
            pulled.append(i)
            yield b

    moved = DeviceBatches(batches(), CUDA)
    first = next(moved)
    assert pulled == [0, 1]  # the next batch is on its way while this one is used
    for k, batch in enumerate([first, next(moved), next(moved)]):
        for name in DEVICE_FIELDS:
            value = getattr(batch, name)
            if value is not None:
                assert value.device.type == "cuda", name
                assert torch.equal(value.cpu(), getattr(source[k], name)), name
        assert batch.text_obs.device.type == "cpu"  # ids are looked up on the host


@needs_cuda
@pytest.mark.parametrize(("paper_setting", "compile"), [  # texts apart; a joint pair
    (False, False), (True, False), (False, "graph")])
def test_cuda_update_makes_no_host_sync(embedder, paper_setting, compile) -> None:
    agent = make_agent(embedder, device="cuda", use_goal=True, use_language_state="sbert",
                       paper_setting=paper_setting, compile=compile)
    moved = DeviceBatches(iter([replay_batch(0)] * 4), CUDA)
    # embeds the batch's texts (a sync, once per new text); with compile=graph also records
    agent.update(next(moved), step=4)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        metrics = [agent.update(next(moved), step=8 + 4 * i) for i in range(2)]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert all(v.device.type == "cuda" for m in metrics for v in m.values())
    rows = mean_metrics({k: [m[k] for m in metrics] for k in metrics[0]})
    assert np.isfinite(list(rows.values())).all()
    if compile == "graph":
        assert agent._graphed.recordings == 1  # recorded once, replayed since


@needs_cuda
def test_cuda_graph_updates_keep_each_updates_metrics(embedder) -> None:
    """With compile=reduce-overhead the compiled passes replay as CUDA graphs, whose outputs
    are rewritten by the next replay: the metrics kept for the logged row must still hold each
    update's own values, and the updates must match eager ones."""
    batches = [replay_batch(i) for i in range(6)]
    graphs = make_agent(embedder, device="cuda", use_goal=True, compile="reduce-overhead")
    eager = make_agent(embedder, device="cuda", use_goal=True)
    moved = DeviceBatches(iter(batches * 3), CUDA)  # one batch ahead: never runs dry here
    kept = [graphs.update(next(moved), step=4 * i) for i in range(len(batches))]
    fresh = [eager.update(next(moved), step=4 * i) for i in range(len(batches))]
    for mine, theirs in zip(kept, fresh):
        assert read_metrics(mine)["loss"] == pytest.approx(read_metrics(theirs)["loss"], rel=1e-3)


@needs_cuda
@pytest.mark.parametrize("compile", [False, "graph"])
def test_bf16_update_on_cuda(embedder, compile) -> None:
    if bf16_support(CUDA) is None:
        pytest.skip("this GPU does not support bf16")
    batch = make_batch(16, seed=3)
    fp32 = make_agent(embedder, device="cuda", use_goal=True)
    bf16 = make_agent(embedder, device="cuda", use_goal=True, precision="bf16", compile=compile)
    assert _loss_after(bf16, batch)[0] == pytest.approx(_loss_after(fp32, batch)[0], rel=0.05)
    assert all(p.dtype == torch.float32 for p in bf16.online.parameters())
    losses = _loss_after(bf16, batch, updates=40)
    assert losses[-1] < 0.5 * losses[0]


# ----------------------------------------------------------------------------- compile=graph
def _same_metrics(mine: dict, theirs: dict) -> None:
    mine, theirs = read_metrics(mine), read_metrics(theirs)
    assert mine.keys() == theirs.keys()
    for key in mine:
        assert mine[key] == pytest.approx(theirs[key], rel=1e-4, abs=1e-6), key


def _same_weights(a, b) -> None:
    for (name, x), y in zip(a.online.state_dict().items(), b.online.state_dict().values()):
        assert torch.allclose(x, y, rtol=1e-4, atol=1e-6), name


@needs_cuda
@pytest.mark.parametrize("paper_setting", [False, True])  # texts apart; a joint pair
def test_graphed_updates_are_eager_updates(embedder, paper_setting) -> None:
    """compile=graph records the whole step once (its warm-up steps undone) and replays it:
    each update's own metrics are kept (the graph rewrites its outputs), and the losses, the
    weights and Adam's step count are those of eager updates on the same batches."""
    kw = {"device": "cuda", "use_goal": True, "use_language_state": "sbert",
              "paper_setting": paper_setting}
    graphed, eager = make_agent(embedder, compile="graph", **kw), make_agent(embedder, **kw)
    batches = [replay_batch(i) for i in range(6)]
    kept = [graphed.update(b, step=4 * (i + 1)) for i, b in enumerate(batches)]
    fresh = [eager.update(b, step=4 * (i + 1)) for i, b in enumerate(batches)]
    assert graphed._graphed.recordings == 1
    assert len({read_metrics(m)["loss"] for m in kept}) == len(batches)  # not the last one's
    for mine, theirs in zip(kept, fresh):
        _same_metrics(mine, theirs)
    _same_weights(graphed, eager)
    steps = {float(s["step"]) for s in graphed.optimizer.state.values()}
    assert steps == {float(len(batches))}  # the warm-up steps were undone


@needs_cuda
def test_graphed_step_records_again_after_a_resume(embedder) -> None:
    """Resuming replaces Adam's state tensors, which the old recording points at: the next
    update records again, and the resumed run goes on as an eager one would."""
    kw = {"device": "cuda", "use_goal": True}
    first = make_agent(embedder, compile="graph", **kw)
    for i in range(3):
        first.update(replay_batch(i), step=4 * (i + 1))
    saved = io.BytesIO()
    torch.save(first.state_dict(), saved)

    def snapshot() -> dict:  # each agent its own tensors, as from a snapshot file (an
        saved.seek(0)        # optimiser loads a state dict's tensors without copying them)
        return torch.load(saved, weights_only=False)

    resumed, eager = make_agent(embedder, compile="graph", **kw), make_agent(embedder, **kw)
    resumed.update(replay_batch(9), step=4)  # recorded before the resume
    resumed.load_state_dict(snapshot())
    eager.load_state_dict(snapshot())
    assert resumed._graphed.recordings == 0
    for i in range(3, 6):
        _same_metrics(resumed.update(replay_batch(i), step=4 * (i + 1)),
                      eager.update(replay_batch(i), step=4 * (i + 1)))
    assert resumed._graphed.recordings == 1
    _same_weights(resumed, eager)
