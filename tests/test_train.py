"""The training loop (xsa/train.py), checkpoints (xsa/stack/checkpoint.py), loading a trained run folder
(xsa/runs/load.py) and bits per byte (xsa/stack/bpb.py):
checks (e), (g), (h), (i) of the validation stage, plus bad-input errors. All on the smoke preset."""

import hashlib
import json
import math
import os
from pathlib import Path

import pytest
import torch

import xsa.stack.attention
import xsa.stack.model
from xsa.runs.load import load_model
from xsa.stack import checkpoint
from xsa.stack.config import ConfigError
from xsa.stack.presets import make_config
from xsa.base.records import read_json, read_jsonl
from xsa.train import EMA_BETA, TrainingDiverged, main, train

from conftest import QUIET, kill_during, spawn_ranks


def run(cfg, out, data, **kw):
    return train(cfg, out, data_dir=data, progress=False, **kw)


def losses(out) -> list[float]:
    return [r["train_loss"] for r in read_jsonl(Path(out) / "metrics.jsonl") if "train_loss" in r]


def files_digest(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


# -----------------------------------------------------------------------------
# (e) baseline == alpha 0 through the XSA formula, step by step

def xsa_formula(y, v, alpha, eps=xsa.stack.attention.XSA_EPS):
    """The XSA formula written out plainly (GQA by repeat_interleave), with no alpha == 0 shortcut."""
    v = v.repeat_interleave(y.size(2) // v.size(2), dim=2)
    coef = (y * v).sum(-1, keepdim=True) / ((v * v).sum(-1, keepdim=True) + eps)
    return y - alpha * coef * v


def test_alpha0_training_matches_baseline(smoke_data, tmp_path, monkeypatch):
    cfg = make_config("smoke", num_tokens=50 * 4 * 64, **QUIET)
    base = run(cfg, tmp_path / "base", smoke_data)
    # the alpha-0 arm: every layer runs the full formula (z = y - 0 * coef * v), no shortcut
    calls = []

    def formula_counted(y, v, alpha, eps=xsa.stack.attention.XSA_EPS):
        calls.append(alpha)
        return xsa_formula(y, v, alpha, eps)
    monkeypatch.setitem(xsa.stack.attention.XSA_VARIANTS, "xsa", formula_counted)
    zero = run(make_config("smoke", num_tokens=50 * 4 * 64, xsa_alpha=0.0, xsa_layers="all", **QUIET),
               tmp_path / "alpha0", smoke_data)
    # the sensitivity of the comparison: alpha = 1 must move the losses by far more than 1e-5
    n_calls = len(calls)
    one = run(make_config("smoke", num_tokens=50 * 4 * 64, xsa_alpha=1.0, **QUIET), tmp_path / "alpha1", smoke_data)
    a, b, c = losses(tmp_path / "base"), losses(tmp_path / "alpha0"), losses(tmp_path / "alpha1")
    assert len(a) == len(b) == 50
    assert n_calls >= 50 * cfg.model.n_layer and set(calls[:n_calls]) == {0.0}
    assert max(abs(x - y) for x, y in zip(a, b)) <= 1e-5
    assert max(abs(x - y) for x, y in zip(a, c)) > 1e-3
    assert base["steps"] == zero["steps"] == one["steps"] == 50


# -----------------------------------------------------------------------------
# (g) kill and resume ends bit-identical

@pytest.mark.parametrize("compiled", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["eager", "compiled"])
def test_killed_and_resumed_run_is_bit_identical(smoke_data, tmp_path, compiled):
    # compiled: the CPU policy that compiles (fp32, inductor) is deterministic at a fixed thread
    # count: a second run of the seed and a killed-and-resumed one end on the same weights
    cfg = make_config("smoke", eval_every=10, checkpoint_every=10, cpu_compile=compiled)
    full = run(cfg, tmp_path / "full", smoke_data)
    if compiled:
        assert run(cfg, tmp_path / "again", smoke_data)["final_weights_sha256"] == full["final_weights_sha256"]

    # kill the second run during update 17: its last checkpoint is step 10, its log reaches step 16
    kill_during(cfg, tmp_path / "killed", smoke_data, step=16)
    assert max(r["step"] for r in read_jsonl(tmp_path / "killed" / "metrics.jsonl")) == 16
    assert not (tmp_path / "killed" / "summary.json").exists()

    resumed = run(cfg, tmp_path / "killed", smoke_data, resume=True)
    assert resumed["final_weights_sha256"] == full["final_weights_sha256"]
    assert resumed["steps"] == full["steps"] == cfg.num_iterations
    # the log is the uninterrupted one: each step once, the same losses bit for bit
    assert [r["step"] for r in read_jsonl(tmp_path / "killed" / "metrics.jsonl")] == list(range(0, 31))
    assert losses(tmp_path / "killed") == losses(tmp_path / "full")


def test_max_steps_then_resume_is_bit_identical(smoke_data, tmp_path):
    cfg = make_config("smoke", **QUIET)
    full = run(cfg, tmp_path / "full", smoke_data)
    part = run(cfg, tmp_path / "part", smoke_data, max_steps=7)
    assert part["steps"] == 7 and not part["complete"]
    done = run(cfg, tmp_path / "part", smoke_data, resume=True)
    assert done["complete"] and done["final_weights_sha256"] == full["final_weights_sha256"]


def test_provenance_names_the_commit_a_run_started_from(smoke_data, tmp_path, monkeypatch):
    """The commit is taken when training starts and kept through a resume; a run resumed at another
    commit records that one beside it, never in its place."""
    import xsa.base.records
    import xsa.train
    cfg = make_config("smoke", **QUIET)
    state = {"git_commit": "a" * 40, "git_dirty": False}
    monkeypatch.setattr(xsa.train, "git_state", lambda: dict(state))
    monkeypatch.setattr(xsa.base.records, "git_state", lambda: dict(state))
    run(cfg, tmp_path / "same", smoke_data)
    prov = read_json(tmp_path / "same" / "provenance.json")
    assert prov["git_commit"] == "a" * 40 and "git_commit_end" not in prov
    run(cfg, tmp_path / "part", smoke_data, max_steps=7)
    state.update(git_commit="b" * 40, git_dirty=True)
    run(cfg, tmp_path / "part", smoke_data, resume=True)
    prov = read_json(tmp_path / "part" / "provenance.json")
    assert (prov["git_commit"], prov["git_dirty"]) == ("a" * 40, False)
    assert (prov["git_commit_end"], prov["git_dirty_end"]) == ("b" * 40, True)


# -----------------------------------------------------------------------------
# (h) 2 processes (gloo; the optimizers average the gradients, each Muon matrix updated by its
# owner rank and broadcast) == 1 process with 2 micro-batches

def _ddp_worker(rank, out, data):
    cfg = make_config("smoke", total_batch_size=2 * 4 * 64, **QUIET)
    train(cfg, out, data_dir=data, max_steps=8, progress=False, device="cpu")


def test_ddp_matches_gradient_accumulation(smoke_data, tmp_path):
    cfg = make_config("smoke", total_batch_size=2 * 4 * 64, **QUIET)
    single = run(cfg, tmp_path / "single", smoke_data, max_steps=8)
    spawn_ranks(_ddp_worker, str(tmp_path / "ddp"), str(smoke_data))
    ddp = read_json(tmp_path / "ddp" / "summary.json")
    assert ddp["world_size"] == 2 and ddp["steps"] == single["steps"] == 8
    a, b = losses(tmp_path / "single"), losses(tmp_path / "ddp")
    # halving is exact in floating point, so (g1 + g2) / 2 over ranks and g1 / 2 + g2 / 2 over
    # micro-batches agree to the bit here; the tolerance only allows for other reduction orders
    assert len(a) == len(b) == 8
    assert max(abs(x - y) for x, y in zip(a, b)) < 1e-6
    assert abs(ddp["val_bpb"] - single["val_bpb"]) < 1e-6
    wa = torch.load(tmp_path / "single" / "ckpt" / "model.pt", weights_only=True)["model"]
    wb = torch.load(tmp_path / "ddp" / "ckpt" / "model.pt", weights_only=True)["model"]
    assert max((wa[k] - wb[k]).abs().max().item() for k in wa) < 1e-6
    assert ddp["final_weights_sha256"] == single["final_weights_sha256"]  # here to the bit


# Resume under torchrun: Muon's momentum and second moments live on each matrix's owner rank only;
# the checkpoint gathers them, so stopping and resuming changes nothing, on any world size

RESUME_2 = dict(total_batch_size=2 * 4 * 64, num_tokens=30 * 2 * 4 * 64, eval_every=1000, checkpoint_every=10)


def _ddp_plan_worker(rank, out, data, plan):
    """Every rank trains `out` once per entry of `plan` (train's keyword arguments), in one process group."""
    import torch.distributed as dist
    dist.init_process_group("gloo")
    try:
        for kw in plan:
            train(make_config("smoke", **RESUME_2), out, data_dir=data, progress=False, device="cpu", **kw)
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_rank_resume_is_bit_identical(smoke_data, tmp_path):
    data = str(smoke_data)
    spawn_ranks(_ddp_plan_worker, str(tmp_path / "full"), data, [{}])
    spawn_ranks(_ddp_plan_worker, str(tmp_path / "part"), data, [dict(max_steps=20), dict(resume=True)])
    full, part = read_json(tmp_path / "full" / "summary.json"), read_json(tmp_path / "part" / "summary.json")
    assert full["world_size"] == part["world_size"] == 2 and full["steps"] == part["steps"] == 30
    assert part["final_weights_sha256"] == full["final_weights_sha256"]
    assert losses(tmp_path / "part") == losses(tmp_path / "full")
    state = torch.load(checkpoint.state_path(tmp_path / "part"), weights_only=True)
    muon = state["optimizers"][1]["state"]
    n_matrices = len(state["optimizers"][1]["param_groups"][0]["params"])
    assert state["world_size"] == 2 and len(muon) == n_matrices  # every rank's share, not rank 0's alone
    assert all(t.abs().sum() > 0 for entry in muon.values() for t in entry.values())

    # the same 2-rank checkpoint at step 20 resumed by one process (2 micro-batches): still bit for bit
    one = tmp_path / "one"
    spawn_ranks(_ddp_plan_worker, str(one), data, [dict(max_steps=20)])
    resumed = train(make_config("smoke", **RESUME_2), one, data_dir=smoke_data, resume=True, progress=False)
    assert resumed["world_size"] == 1 and resumed["final_weights_sha256"] == full["final_weights_sha256"]


def test_checkpoint_missing_owner_state_is_refused(smoke_data, tmp_path):
    """A state.pt holding rank 0's Muon matrices alone (as rank 0 used to save under torchrun) is
    refused, instead of restarting the other matrices' momentum from zero."""
    cfg = make_config("smoke", **QUIET)
    out = tmp_path / "r"
    run(cfg, out, smoke_data, max_steps=3)
    path = checkpoint.state_path(out)
    state = torch.load(path, weights_only=True)
    del state["optimizer_state"], state["world_size"]
    muon = state["optimizers"][1]["state"]
    for key in list(muon)[1::2]:  # the matrices rank 1 of 2 owned
        del muon[key]
    torch.save(state, path)
    with pytest.raises(ValueError, match="Muon state of 7 of 13 matrices"):
        run(cfg, out, smoke_data, resume=True)


# -----------------------------------------------------------------------------
# (i) the logged EMA, the step convention, the run records

def test_metrics_ema_and_step_convention(smoke_data, tmp_path):
    cfg = make_config("smoke", eval_every=10)
    summary = run(cfg, tmp_path / "r", smoke_data)
    rows = read_jsonl(tmp_path / "r" / "metrics.jsonl")
    assert set(rows[0]) == {"step", "val_bpb", "diag"}  # step 0: the initial model's evaluation only
    assert all(len(v) == cfg.model.n_layer for k, v in rows[0]["diag"].items() if k != "logit_rms")  # per layer
    assert rows[0]["diag"]["logit_rms"] > 0  # the output logits' RMS before the softcap: one number
    train_rows = [r for r in rows if "train_loss" in r]
    assert train_rows[0]["step"] == 1 and [r["step"] for r in train_rows] == list(range(1, 31))
    ema = 0.0
    for r in train_rows:
        ema = EMA_BETA * ema + (1 - EMA_BETA) * r["train_loss"]
        assert r["train_loss_ema"] == pytest.approx(ema / (1 - EMA_BETA ** r["step"]), rel=1e-12)
    assert train_rows[0]["train_loss_ema"] == pytest.approx(train_rows[0]["train_loss"], rel=1e-12)
    assert [r["step"] for r in rows if "val_bpb" in r] == [0, 10, 20, 30]
    assert rows[-1]["val_bpb"] < rows[0]["val_bpb"]  # it learns
    assert all(r["tok_per_s"] > 0 and r["mfu"] > 0 for r in train_rows)
    for key in ("val_bpb", "steps", "tokens", "tok_per_s", "seed", "preset", "xsa_alpha", "xsa_layers",
                "xsa_value", "optimizer", "final_weights_sha256", "train_loss_final", "wall_time_s"):
        assert key in summary
    # the arm in full: its name, its overrides and every attention field (variant and gate too)
    assert {k: summary[k] for k in ("arm", "overrides", "xsa_variant", "xsa_gate")} == dict(
        arm="smoke_base", overrides={}, xsa_variant="xsa", xsa_gate=False)
    assert summary["tokens"] == 30 * cfg.total_batch_size and summary["train_loss_final"] == train_rows[-1]["train_loss"]
    assert read_json(tmp_path / "r" / "summary.json") == json.loads(json.dumps(summary))
    assert read_json(tmp_path / "r" / "provenance.json")["config_hash"] == cfg.config_hash()
    assert read_json(tmp_path / "r" / "config.json")["data_dir"] == str(smoke_data)
    # the final weights' hash is the hash of the saved model
    model, tok, cfg2 = load_model(tmp_path / "r")
    assert cfg2 == cfg and tok.vocab_size == cfg.model.vocab_size
    assert checkpoint.weights_sha256(model.state_dict()) == summary["final_weights_sha256"]


def test_mfu_subtracts_each_clocks_own_pause(smoke_data, tmp_path, monkeypatch):
    # on a loaded CPU the process gets less CPU time than wall time passes; here its clock runs at a
    # hundredth of wall time, so subtracting the evaluation's wall-time pause from it would leave a
    # negative interval (and no MFU) on every log step that follows an evaluation
    import time

    import xsa.stack.timers
    monkeypatch.setattr(xsa.stack.timers, "clock", lambda device: time.perf_counter() / 100)
    run(make_config("smoke", eval_every=10), tmp_path / "r", smoke_data)
    train_rows = [r for r in read_jsonl(tmp_path / "r" / "metrics.jsonl") if "train_loss" in r]
    assert train_rows and all(r["mfu"] is not None and r["mfu"] > 0 for r in train_rows)


def test_the_timers_leave_out_the_warm_up_window_and_the_pauses(monkeypatch):
    """The run's timed training (its tok/s and MFU) adds each log window's seconds and tokens, less
    the pauses, except the first window of a process, which holds its warm-up."""
    import types

    import xsa.stack.timers
    now = [0.0]
    fake = types.SimpleNamespace(perf_counter=lambda: now[0], time=lambda: now[0], process_time=lambda: now[0])
    monkeypatch.setattr(xsa.stack.timers, "time", fake)
    monkeypatch.setattr(xsa.stack.timers, "clock", lambda device: now[0] / 2)  # a device clock at half speed
    timers, loop = xsa.stack.timers.Timers(torch.device("cpu")), xsa.stack.timers.Loop()
    now[0] = 1.0  # the initial evaluation
    timers.start_log()
    timers.steps, now[0] = 2, 4.0
    assert timers.close_log(loop, 10) == (3.0, 1.5, 20)  # logged, not timed: the warm-up
    assert (loop.train_time_s, loop.train_clock_s, loop.timed_tokens) == (0.0, 0.0, 0)
    timers.steps, now[0] = 1, 5.0
    with timers.paused():
        now[0] = 7.0
    now[0] = 8.0
    assert timers.close_log(loop, 10) == (2.0, 1.0, 10)
    assert (loop.train_time_s, loop.train_clock_s, loop.timed_tokens, timers.steps) == (2.0, 1.0, 10, 0)
    timers.add_run_time(loop)
    assert (loop.wall_time_s, loop.cpu_time_s) == (8.0, 8.0)


def test_evaluate_bpb_counts_bytes_not_specials():
    from xsa.stack.bpb import evaluate_bpb

    class Uniform(torch.nn.Module):  # loss ln(V) nats on every token
        def forward(self, x, y, loss_reduction="mean"):
            return torch.full(y.shape, math.log(4.0)) * (y >= 0)
    token_bytes = torch.tensor([0, 1, 2, 1])  # token 0 is special
    y = torch.tensor([[0, 1, 2, 3, -1]])
    bpb = evaluate_bpb(Uniform(), [(y, y)], token_bytes)
    assert bpb == pytest.approx(3 * 2.0 / 4)  # 3 scored tokens x 2 bits over 4 bytes


# -----------------------------------------------------------------------------
# Guards and bad input: each error names the field, nothing is overwritten

def test_nan_guard_keeps_last_good_checkpoint(smoke_data, tmp_path, monkeypatch):
    orig = xsa.stack.model.GPT.forward
    calls = {"n": 0}

    def poisoned(self, idx, targets=None, **kw):
        out = orig(self, idx, targets, **kw)
        if self.training and targets is not None:
            calls["n"] += 1
            if calls["n"] > 5:
                return out * float("nan")
        return out
    monkeypatch.setattr(xsa.stack.model.GPT, "forward", poisoned)
    cfg = make_config("smoke", eval_every=1000, checkpoint_every=5)
    with pytest.raises(TrainingDiverged, match="step 6"):
        run(cfg, tmp_path / "r", smoke_data)
    state = torch.load(checkpoint.state_path(tmp_path / "r"), weights_only=True)
    assert state["step"] == 5 and all(t.isfinite().all() for t in state["model"].values())


@pytest.mark.parametrize("args, field", [
    (["--alpha", "1.5"], "xsa_alpha"),
    (["--alpha", "1", "--xsa-layers", "middle:2"], "xsa_layers"),
    (["--alpha", "1", "--xsa-layers", "5"], "xsa_layers"),
    (["--preset", "d13"], "preset"),
    (["--seed", "-1"], "seed"),
    (["--seed", "100000000000000000000"], "seed"),
    (["--seed", "1e20"], "seed"),
    (["--xsa-value", "plain"], "xsa_value"),  # no XSA layer would use it
    (["--device", "tpu9"], "tpu9"),
])
def test_cli_bad_input_names_the_field(args, field, tmp_path, capsys):
    argv = ["--preset", "smoke", "--out", str(tmp_path / "r")] + args
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and field in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()  # checked before anything was created


def test_cli_device_batch_size_keeps_the_total_batch(smoke_data, tmp_path):
    out = tmp_path / "r"
    main(["--preset", "smoke", "--device-batch-size", "2", "--max-steps", "1", "--out", str(out),
          "--data-dir", str(smoke_data), "--no-progress"])
    saved = read_json(out / "config.json")  # the run is the preset's; the rows it ran at are provenance
    assert saved["device_batch_size"] == 4 and saved["total_batch_size"] == make_config("smoke").total_batch_size
    assert read_json(out / "provenance.json")["device_batch_size"] == 2


def test_cli_bad_out_fails_before_any_work(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    cases = [(tmp_path / "file", "is a file")]
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    if os.geteuid() != 0:  # root may write into a read-only folder: the check only applies to users
        cases.append((ro / "r", "read-only"))
    for out, words in cases:
        with pytest.raises(SystemExit) as e:
            main(["--preset", "smoke", "--out", str(out), "--no-progress"])
        err = capsys.readouterr().err
        assert e.value.code == 2 and words in err and "Traceback" not in err
    assert (tmp_path / "file").read_text() == "x" and not (ro / "r").exists()
    ro.chmod(0o700)


def test_advice_never_loops_on_a_damaged_run_folder(smoke_data, tmp_path):
    """A run folder whose config.json was deleted: neither --overwrite nor --resume is suggested
    when neither would work; nothing in the folder is touched."""
    cfg = make_config("smoke", **QUIET)
    out = tmp_path / "r"
    run(cfg, out, smoke_data, max_steps=2)
    (out / "config.json").unlink()
    before = files_digest(out)
    for kw in ({}, {"overwrite": True}):
        with pytest.raises(FileExistsError) as e:
            run(cfg, out, smoke_data, **kw)
        assert "--overwrite" not in str(e.value) and "another --out" in str(e.value)
    with pytest.raises(FileNotFoundError, match="config.json"):
        run(cfg, out, smoke_data, resume=True)
    assert files_digest(out) == before


def test_flipped_bit_in_a_checkpoint_is_caught(smoke_data, tmp_path):
    """One flipped bit in the weights used to resume silently (rc 0, wrong weights); the archive's
    CRCs are now checked before any checkpoint or model is loaded."""
    cfg = make_config("smoke", eval_every=1000, checkpoint_every=5)
    out = tmp_path / "r"
    run(cfg, out, smoke_data, max_steps=5)
    for path in (checkpoint.state_path(out), checkpoint.model_path(out)):
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x10  # inside a tensor record
        path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="state.pt.*CRC"):
        run(cfg, out, smoke_data, resume=True)
    with pytest.raises(ValueError, match="model.pt.*CRC"):
        load_model(out)


def test_missing_state_never_restarts_a_trained_run(smoke_data, tmp_path):
    """A deleted ckpt/state.pt made --resume restart from step 0 without a word."""
    cfg = make_config("smoke", eval_every=1000, checkpoint_every=5)
    out = tmp_path / "r"
    run(cfg, out, smoke_data, max_steps=7)
    checkpoint.state_path(out).unlink()
    before = files_digest(out)
    with pytest.raises(FileNotFoundError, match="state.pt is missing"):
        run(cfg, out, smoke_data, resume=True)
    assert files_digest(out) == before


def test_bad_metrics_lines_name_the_file(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"step": 1}\n\xff\xfe\n')
    with pytest.raises(ValueError, match="metrics.jsonl: not UTF-8"):
        read_jsonl(path)
    path.write_text('{"step": 1}\n[1, 2]\n{"step": 2}\n')
    with pytest.raises(ValueError, match="metrics.jsonl:2: expected a JSON object"):
        read_jsonl(path)


def test_bad_model_shapes_name_the_field():
    with pytest.raises(ConfigError, match="n_embd"):
        make_config("smoke", n_embd=64, n_head=3)
    model = xsa.stack.model.GPT(make_config("smoke").model)
    with pytest.raises(ConfigError, match="sequence_len"):
        model(torch.zeros(1, model.rotary_len + 1, dtype=torch.long))


def test_existing_folder_resume_mismatch_and_vocab(smoke_data, tmp_path, monkeypatch):
    cfg = make_config("smoke", **QUIET)
    out = tmp_path / "r"
    run(cfg, out, smoke_data, max_steps=3)
    before = files_digest(out)
    with pytest.raises(FileExistsError, match="out"):
        run(cfg, out, smoke_data)
    with pytest.raises(ConfigError, match="seed"):
        run(make_config("smoke", seed=1, **QUIET), out, smoke_data, resume=True)
    with pytest.raises(FileNotFoundError, match="resume"):
        run(cfg, tmp_path / "nothing", smoke_data, resume=True)
    from xsa.data.tokenizer import Tokenizer

    class Wrong:
        vocab_size = 4096
    monkeypatch.setattr(Tokenizer, "from_data_dir", classmethod(lambda cls, d: Wrong()))
    with pytest.raises(ConfigError, match="vocab_size"):
        run(cfg, out, smoke_data, resume=True)
    with pytest.raises(ConfigError, match="vocab_size"):
        load_model(out)
    assert files_digest(out) == before  # nothing was touched
    monkeypatch.undo()
    # --overwrite replaces the run
    s = run(cfg, out, smoke_data, overwrite=True, max_steps=2)
    assert s["steps"] == 2


def test_corrupt_checkpoint_names_the_file(smoke_data, tmp_path):
    cfg = make_config("smoke", **QUIET)
    out = tmp_path / "r"
    run(cfg, out, smoke_data, max_steps=2)
    for path in (checkpoint.model_path(out), checkpoint.state_path(out)):
        path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(ValueError, match="model.pt"):
        load_model(out)
    with pytest.raises(ValueError, match="state.pt"):
        run(cfg, out, smoke_data, resume=True)


def test_diagnostics_at_every_kth_evaluation(smoke_data, tmp_path):
    # diag_every=2: the log's per-layer diagnostics at evaluations 0, 2, ... and the last, val bpb at all
    cfg = make_config("smoke", eval_every=5, checkpoint_every=1000, diag_every=2)
    run(cfg, tmp_path / "r", smoke_data)
    evals = [r for r in read_jsonl(tmp_path / "r" / "metrics.jsonl") if "val_bpb" in r]
    assert [r["step"] for r in evals] == [0, 5, 10, 15, 20, 25, 30]
    assert [r["step"] for r in evals if "diag" in r] == [0, 10, 20, 30]
