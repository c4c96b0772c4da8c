"""The GPU node's recipe (xsa/gpu_study.py, `make gpu-study`): the launch commands train the gpu
study's runs under their own ids and configs, skip finished runs and resume started ones."""

import json

import pytest

import xsa.gpu_study as gs
import xsa.train as t
from xsa.stack.spec import Run
from xsa.studies.registry import STUDIES


def test_commands_train_the_studys_runs_under_their_ids(monkeypatch, tmp_path):
    study = STUDIES["gpu"]()
    cmds = gs.commands(study, 8)
    assert len(cmds) == len(study.runs) == 4
    seen = []
    monkeypatch.setattr(t, "train", lambda cfg, out, **kw: seen.append((cfg, out, kw)) or
                        {"val_bpb": 0.0, "steps": 0, "tok_per_s": None})
    for cmd in cmds:
        assert cmd[:5] == [*gs.LAUNCH, "--standalone", "--nproc_per_node=8"]
        t.main(cmd[cmd.index("xsa.train") + 1:])
    for run, (cfg, out, _) in zip(study.runs, seen):
        assert Run.from_config(cfg) == run and out.name == run.run_id and cfg == run.config()


def test_finished_runs_are_skipped_and_started_ones_resumed(monkeypatch, tmp_path):
    from xsa.runs.layout import Layout
    study = STUDIES["gpu"]()
    monkeypatch.setattr("xsa.gpu_study.default_layout", lambda name: Layout(tmp_path, tmp_path / "paper", name))
    first, second = study.runs[:2]
    done = tmp_path / "runs" / first.run_id
    done.mkdir(parents=True)
    monkeypatch.setattr("xsa.gpu_study.finished_summary", lambda out, cfg: {} if out == done else None)
    (tmp_path / "runs" / second.run_id).mkdir()
    (tmp_path / "runs" / second.run_id / "config.json").write_text(json.dumps(second.config().to_dict()))
    cmds = gs.commands(study, 2, device_batch_size=8)
    assert len(cmds) == 3 and "--resume" in cmds[0] and "--resume" not in cmds[1]
    assert all(c[-2:] == ["--device-batch-size", "8"] for c in cmds)


def test_every_override_reaches_the_training_command():
    from xsa.train import parser, run_of_args
    run = Run.of("d12", seed=3, recipe="nanochat-324e69c", backout=False, xsa_alpha=1.0)
    assert run_of_args(parser().parse_args(gs.train_args(run))) == run


def test_an_adaptive_study_is_passed_over_until_it_declares_nothing_left(monkeypatch):
    """d12-test declares its next block of pairs once the last is trained: main() passes again until a
    pass finds nothing to train; a fixed study (gpu) gets one pass."""
    import xsa.gpu_study as g
    passes = {"d12-test": [[["a"]], [["b"]], []], "gpu": [[["c"]], [["d"]]]}  # each pass: its commands
    ran = []
    monkeypatch.setattr(g, "commands", lambda study, nproc, batch=None: passes[study.name].pop(0))
    monkeypatch.setattr(g.subprocess, "run", lambda cmd: ran.append(cmd) or type("R", (), {"returncode": 0})())
    monkeypatch.setattr(g, "cuda_problems", lambda nproc=None: [])  # the GPUs' check passes, as on the node
    assert g.main(["--study", "d12-test", "--nproc", "8"]) == 0 and ran == [["a"], ["b"]]
    ran.clear()
    assert g.main(["--study", "gpu", "--nproc", "8"]) == 0 and ran == [["c"]]
