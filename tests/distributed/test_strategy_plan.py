"""Where the strategy comes from, and the contradictions and bad files that must stop a run.

`plan_strategy` reads only the config and the launcher's environment, so these run in-process
with the environment set as each launcher would set it; the launchers themselves are exercised
in test_strategies.py.
"""

import json

import pytest

from solution.distributed.plan import Plan, plan_strategy
from solution.distributed.strategy import Strategy
from solution.training.config import load_config

pytestmark = pytest.mark.usefixtures("clean_env")  # no launcher variables from the shell running pytest


def cfg(*overrides):
    return load_config("configs/train/tiny.yaml", list(overrides))


def plan_of(c):
    """The plan for a training config: its `distributed:` section and the training facts the engine is told."""
    return plan_strategy(c.distributed, c.training_facts())


def test_world_size_alone_picks_single_or_ddp(monkeypatch):
    assert plan_of(cfg()).name == "single"
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert plan_of(cfg()).name == "ddp"


@pytest.fixture
def one_rank_group(monkeypatch):
    """A gloo process group of one rank in this process (what a launcher with one process sets up)."""
    import torch.distributed as dist

    from solution.distributed.ports import free_port

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def engine_check(name: str, num_processes: int, model) -> str:
    """Strategy.check_engine of a plan named `name` whose Accelerator counts `num_processes`."""
    from types import SimpleNamespace

    strategy = Strategy.__new__(Strategy)  # only the check: no Accelerator, no engine built
    strategy.plan, strategy.accelerator = Plan(name, "test"), SimpleNamespace(num_processes=num_processes)
    return strategy.check_engine(model)


def test_engine_check_accepts_ddp_over_one_rank_for_single_and_names_it(one_rank_group):
    """One rank under a launcher on CPU: Accelerate wraps the model in DDP over a world of one. `single`
    accepts it and reports the wrapper; it refuses DDP over several processes and a bare model for `ddp`."""
    import torch

    bare = torch.nn.Linear(2, 2)
    wrapped = torch.nn.parallel.DistributedDataParallel(bare)
    assert engine_check("single", 1, wrapped) == "DistributedDataParallel"
    assert engine_check("single", 1, bare) == "Linear"
    with pytest.raises(ValueError, match="strategy single expected its engine, but the model is wrapped by "
                                         "DistributedDataParallel"):
        engine_check("single", 2, wrapped)
    with pytest.raises(ValueError, match="strategy ddp expected its engine, but the model is wrapped by Linear"):
        engine_check("ddp", 2, bare)


@pytest.mark.parametrize("name,stage", [("zero1", 1), ("zero2", 2), ("zero3", 3), ("zero3_offload", 3)])
def test_deepspeed_file_names_the_stage(name, stage, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    plan = plan_of(cfg("--deepspeed", f"configs/ds/{name}.json"))
    assert (plan.name, plan.zero_stage, plan.is_deepspeed) == (name, stage, True)
    assert plan.shards_parameters == (stage == 3)


def test_accelerate_launch_environment(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_CONFIG_FILE", "configs/ds/zero3.json")
    assert plan_of(cfg()).name == "zero3"
    monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED")
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("FSDP_VERSION", "2")
    monkeypatch.setenv("FSDP_RESHARD_AFTER_FORWARD", "false")
    assert plan_of(cfg()).name == "fsdp_grad_op"
    monkeypatch.setenv("FSDP_RESHARD_AFTER_FORWARD", "true")
    assert plan_of(cfg()).name == "fsdp"


@pytest.mark.parametrize("env,overrides,message", [
    ({"WORLD_SIZE": "2", "ACCELERATE_USE_DEEPSPEED": "true",
      "ACCELERATE_DEEPSPEED_CONFIG_FILE": "configs/ds/zero2.json"}, ["--strategy", "fsdp"], "drop one of them"),
    ({"WORLD_SIZE": "2", "ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "1"}, [], "fsdp_version must be 2"),
    ({"WORLD_SIZE": "2"}, ["--strategy", "single"], "launcher started 2 ranks"),
    ({}, ["--strategy", "ddp"], "needs several ranks"),
    ({"WORLD_SIZE": "2"}, ["--strategy", "zero2", "--cpu_offload", "true"], "cpu_offload needs"),
    ({"WORLD_SIZE": "2", "ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2"},
     ["--deepspeed", "configs/ds/zero2.json"], "selects FSDP"),
])
def test_contradictions_are_refused(env, overrides, message, monkeypatch):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ValueError, match=message):
        plan_of(cfg(*overrides))


def test_unknown_strategy_name_is_a_config_error():
    with pytest.raises(ValueError, match="strategy must be one of"):
        cfg("--strategy", "zero4")


@pytest.mark.parametrize("content,message", [
    ("{not json", "not valid JSON"),
    (b"\xff\xfe{}", "not UTF-8"),
    ("[]", "zero_optimization"),
    (json.dumps({"zero_optimization": {"stage": 4}}), "zero_optimization.stage"),
    (json.dumps({"zero_optimization": {"stage": 2}, "optimizer": {"type": "Adam"}}), "leave them out"),
])
def test_bad_deepspeed_json_names_the_file_and_field(content, message, tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    path = tmp_path / "ds.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ValueError, match=message) as e:
        plan_of(cfg("--deepspeed", str(path)))
    assert str(path) in str(e.value)


def test_missing_deepspeed_file():
    with pytest.raises(ValueError, match="no such DeepSpeed config file"):
        plan_of(cfg("--deepspeed", "configs/ds/nope.json"))


def test_fsdp_cpu_offload_without_a_gpu_fails_at_start_up(monkeypatch):
    """FSDP2's CPUOffloadPolicy needs an accelerator; the run must stop with the reason, not deep in torch."""
    import torch

    from solution.distributed.strategy import Strategy

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: FSDP2 cpu_offload is valid here")
    with pytest.raises(ValueError, match="cpu_offload needs a GPU"):
        c = cfg("--strategy", "fsdp", "--cpu_offload", "true")
        Strategy(c.distributed, c.training_facts())


@pytest.mark.parametrize("overrides,env,offload", [
    (["--deepspeed", "configs/ds/zero3.json"], {"WORLD_SIZE": "2"}, False),
    (["--deepspeed", "configs/ds/zero3_offload.json"], {"WORLD_SIZE": "2"}, True),
    (["--strategy", "zero3", "--cpu_offload", "true"], {"WORLD_SIZE": "2"}, True),
    (["--strategy", "fsdp", "--cpu_offload", "true"], {"WORLD_SIZE": "2"}, True),
    (["--strategy", "fsdp"], {"WORLD_SIZE": "2"}, False),
    ([], {"WORLD_SIZE": "2", "ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2", "FSDP_OFFLOAD_PARAMS": "true"}, True),
    ([], {"WORLD_SIZE": "2"}, False),
])
def test_offload_is_one_plan_property(overrides, env, offload, monkeypatch):
    """Whatever expressed it (the JSON, `cpu_offload`, the launch YAML), `Plan.cpu_offload` says it."""
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    plan = plan_of(cfg(*overrides))
    assert plan.cpu_offload is offload
    assert plan.name.endswith("_offload") == (offload and plan.is_deepspeed)


def test_a_zero2_offload_file_is_named_and_offloaded(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    ds = json.loads(open("configs/ds/zero2.json").read())
    ds["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
    path = tmp_path / "zero2_offload.json"
    path.write_text(json.dumps(ds))
    plan = plan_of(cfg("--deepspeed", str(path)))
    assert (plan.name, plan.cpu_offload, plan.shards_parameters) == ("zero2_offload", True, False)


def test_free_port_is_free():
    import socket

    from solution.distributed.ports import free_port

    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # raises if the port were taken


def test_stale_deepspeed_buffers_of_this_port_are_removed_before_a_run_and_live_ones_kept(monkeypatch, tmp_path):
    """A killed run's shared-memory files on this run's port (older than this process) are removed before
    DeepSpeed could map them; a file written after this process started (a live peer's) and another
    port's files are kept."""
    import os
    import time

    from solution.distributed import lifecycle

    monkeypatch.setattr(lifecycle, "SHM_DIR", tmp_path)
    monkeypatch.setenv("MASTER_PORT", "12345")
    uid = os.getuid()
    stale = [tmp_path / f"deepspeed_allreduce_buffer_{uid}_127.0.0.1_12345_{r}" for r in (0, 1)]
    live = tmp_path / f"deepspeed_allreduce_buffer_{uid}_127.0.0.1_12345_2"
    other = tmp_path / f"deepspeed_allreduce_buffer_{uid}_127.0.0.1_54321_0"
    hour_ago = time.time() - 3600
    for path in (*stale, live, other):
        path.write_bytes(b"x")
    for path in (*stale, other):
        os.utime(path, (hour_ago, hour_ago))
    lifecycle.drop_stale_shm_buffers()
    assert [p.exists() for p in stale] == [False, False] and live.exists() and other.exists()


def test_adamw_torch_fused_is_the_default_and_the_same_update_as_adamw_torch():
    """transformers' default since torch 2.8: one fused kernel per group. Same AdamW (weights within float
    rounding after three steps), and its state has the same keys and shapes, so either resumes the other."""
    from dataclasses import replace

    import torch

    from solution.training.optimizer import build_optimizer

    cfg = load_config("configs/train/tiny.yaml")
    assert cfg.optimizer.optim == "adamw_torch_fused"
    runs = {}
    for optim in ("adamw_torch_fused", "adamw_torch"):
        torch.manual_seed(0)
        model = torch.nn.Linear(16, 8)
        opt = build_optimizer([{"params": list(model.parameters()), "weight_decay": 0.01}],
                              replace(cfg.optimizer, optim=optim))
        assert bool(opt.defaults["fused"]) == (optim == "adamw_torch_fused")
        for _ in range(3):
            model(torch.ones(4, 16)).square().sum().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        runs[optim] = (model.weight.detach().clone(), opt.state_dict()["state"])
    (w_fused, s_fused), (w_plain, s_plain) = runs["adamw_torch_fused"], runs["adamw_torch"]
    torch.testing.assert_close(w_fused, w_plain)
    assert {k: {n: v.shape for n, v in s.items()} for k, s in s_fused.items()} == \
        {k: {n: v.shape for n, v in s.items()} for k, s in s_plain.items()}


@pytest.mark.parametrize("native", [False, True])
def test_bf16_on_a_cpu_that_only_emulates_it_is_named(native, monkeypatch, capsys):
    """Emulated bf16 made a training step 14x slower than float32 on an AVX2-only CPU: say so before the run."""
    from solution.distributed import strategy

    monkeypatch.setattr(strategy, "cpu_native_bf16", lambda: native)
    c = cfg("--mixed_precision", "bf16")
    strategy._check_machine(c.training_facts(), plan_of(c), cuda=False)
    warned = "CPU without native bf16" in capsys.readouterr().err
    assert warned is not native


def test_the_strategy_returns_the_accumulation_and_writes_nothing_into_the_config(tmp_path):
    """global_batch_size: the strategy derives the accumulation for the world size and hands it back
    (`Strategy.accumulation`); the config it was given is left as it was (the trainer applies it)."""
    from solution.distributed import strategy

    c = cfg("--global_batch_size", "8", "--per_device_train_batch_size", "2", "--output_dir", str(tmp_path))
    try:
        built = strategy.Strategy(c.distributed, c.training_facts())
        assert (built.accumulation, built.accounting) == (
            4, "global_batch_size 8 at world size 1: 2 per device x 4 accumulation steps")
        assert built.accelerator.gradient_accumulation_steps == 4
    finally:
        strategy.shutdown()
    assert c.gradient_accumulation_steps == 1
