"""Attention diagnostics (xsa/diagnostics.py): the math on hand-built tensors, the model hook,
and the command line on a tiny trained run."""

import json
import math
from pathlib import Path

import pytest
import torch

from xsa.stack.presets import make_config
from xsa.diagnostics import (METRICS, attention_entropy, attention_probs, capture_stats, diagnostics_snapshot,
                             diagonal_mass, expand_kv, main, plot_head_heatmap, plot_layer_curves, self_cosine,
                             value_cosine)
from xsa.stack.model import GPT


def smoke_model(**overrides) -> GPT:
    torch.manual_seed(0)
    model = GPT(make_config("smoke", **overrides).model)
    model.init_weights()
    # nanochat's init zeroes the output projections, which makes every layer's input the same;
    # random ones give each layer its own attention, as after training
    with torch.no_grad():
        for block in model.blocks:
            block.attn.c_proj.weight.normal_(std=0.05)
            block.mlp.c_proj.weight.normal_(std=0.05)
    return model


def tokens(B=2, T=64, V=2048):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(1))


# -----------------------------------------------------------------------------
# Core math on hand-built tensors


def test_identity_attention_has_diagonal_mass_one_and_output_equal_to_value():
    B, H, T, D = 2, 3, 16, 8
    att = torch.eye(T).expand(B, H, T, T)
    v = torch.randn(B, H, T, D)
    y = (att @ v).transpose(1, 2)  # (B, T, H, D): each token's output is its own value
    assert torch.equal(diagonal_mass(att), torch.ones(H))
    assert torch.equal(attention_entropy(att), torch.zeros(H))
    assert torch.allclose(self_cosine(y, v), torch.ones(H), atol=1e-6)


def test_uniform_causal_attention_matches_closed_form():
    # q = 0 makes every score equal: query i spreads 1/(i+1) over its i+1 keys
    B, H, T, D = 1, 2, 10, 4
    att = attention_probs(torch.zeros(B, H, T, D), torch.randn(B, H, T, D), scale=0.125)
    i = torch.arange(1, T, dtype=torch.float32)  # positions 1..T-1 (position 0 is left out)
    assert torch.allclose(diagonal_mass(att), (1 / (i + 1)).mean().expand(H), atol=1e-6)
    assert torch.allclose(attention_entropy(att), torch.log(i + 1).mean().expand(H), atol=1e-5)
    assert torch.equal(att.triu(1), torch.zeros_like(att))  # causal


def test_value_cosine_matches_pairwise_mean_and_gqa_indexing():
    B, Hkv, T, D, H = 3, 2, 7, 5, 4
    v = torch.randn(B, Hkv, T, D)
    u = torch.nn.functional.normalize(v, dim=-1)
    cos = u @ u.transpose(-1, -2)  # (B, Hkv, T, T)
    off = ~torch.eye(T, dtype=torch.bool)
    expected = cos[..., off].mean(dim=(0, -1))  # (Hkv,)
    got = value_cosine(v, H)
    assert got.shape == (H,)
    # query heads 0, 1 read value head 0; heads 2, 3 read value head 1 (as SDPA's enable_gqa)
    assert torch.allclose(got, expected.repeat_interleave(2), atol=1e-6)
    assert torch.equal(expand_kv(v, H)[:, 1], v[:, 0]) and torch.equal(expand_kv(v, H)[:, 2], v[:, 1])


# -----------------------------------------------------------------------------
# On the model


@pytest.mark.parametrize("n_kv_head", [2, 1])
def test_captured_attention_reproduces_the_models_output(n_kv_head):
    """An explicit softmax of the captured q, k at the model's scale gives back its y (so diag_mass and
    entropy describe the attention the model really used)."""
    model = smoke_model(n_kv_head=n_kv_head)
    caps = [dict() for _ in model.blocks]
    for block, cap in zip(model.blocks, caps):
        block.attn.capture = cap
    with torch.no_grad():
        model(tokens())
    for cap in caps:
        att = attention_probs(cap["q"], cap["k"], 1 / math.sqrt(cap["q"].size(-1)))
        y = (att @ expand_kv(cap["v"], cap["q"].size(1))).transpose(1, 2)
        assert torch.allclose(y, cap["y"], atol=1e-5)


@pytest.mark.parametrize("n_kv_head", [2, 1])
def test_xsa_alpha_one_everywhere_makes_output_orthogonal_to_own_value(n_kv_head):
    snap = diagnostics_snapshot(smoke_model(xsa_alpha=1.0, xsa_layers="all", n_kv_head=n_kv_head), tokens())
    assert max(abs(c) for c in snap["cos_z_v"]) < 1e-5
    assert min(abs(c) for c in snap["cos_y_v"]) > 1e-2  # before the projection y is not orthogonal


def test_cos_z_v_equals_cos_y_v_where_xsa_is_off():
    model = smoke_model(xsa_alpha=1.0, xsa_layers="0")
    snap = diagnostics_snapshot(model, tokens())
    assert abs(snap["cos_z_v"][0]) < 1e-5
    assert snap["cos_z_v"][1] == snap["cos_y_v"][1]
    layered = {m: v for m, v in snap.items() if m != "logit_rms"}
    assert set(layered) == {*METRICS, "attn_logit_max"} and all(len(v) == 2 for v in layered.values())
    assert snap["logit_rms"] > 0


def test_snapshot_logs_the_sink_and_gate_and_the_bounded_attention_logit():
    # QK-norm bounds a logit by qk_scale^2 * sqrt(head_dim); the sink's weight is a share; the gate is
    # exactly 1 at its zero initialisation
    model = smoke_model(attn_gate=True, attn_sink=True)
    snap = diagnostics_snapshot(model, tokens())
    c = model.config
    assert all(0 < m <= c.qk_scale ** 2 * c.head_dim ** 0.5 + 1e-4 for m in snap["attn_logit_max"])
    assert all(0 < w < 1 for w in snap["sink_mass"])
    assert snap["gate_mean"] == [1.0] * c.n_layer
    assert "sink_mass" not in diagnostics_snapshot(smoke_model(), tokens())


def test_snapshot_leaves_the_model_as_it_found_it():
    model = smoke_model(xsa_alpha=0.5)
    model.train()
    with torch.no_grad():
        before = model(tokens())
    diagnostics_snapshot(model, tokens())
    assert model.training and all(b.attn.capture is None for b in model.blocks)
    with torch.no_grad():
        assert torch.equal(model(tokens()), before)


def test_capture_stats_on_a_hand_built_identity_capture():
    # keys orthogonal and large: each query's own key dominates, so attention is ~identity
    B, H, T, D = 1, 2, 8, 8
    k = 50 * torch.eye(T).expand(B, H, T, D)
    v = torch.randn(B, H, T, D)
    y = v.transpose(1, 2)
    stats = capture_stats(dict(q=k, k=k, v=v, y=y, z=y), scale=1.0)
    assert torch.allclose(stats["diag_mass"], torch.ones(H)) and torch.allclose(stats["cos_y_v"], torch.ones(H))


# -----------------------------------------------------------------------------
# Command line and figures on a tiny trained run


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A smoke run trained for 2 steps with XSA at layer 0 only: one run covers both cases."""
    from xsa.data import ensure_data
    from xsa.train import train
    run = tmp_path_factory.mktemp("runs") / "xsa-layer0"
    cfg = make_config("smoke", xsa_alpha=1.0, xsa_layers="0", eval_every=1000, checkpoint_every=1000)
    train(cfg, run, data_dir=ensure_data("smoke"), max_steps=2, progress=False)
    return run


def test_cli_writes_pinned_layers_and_refuses_to_overwrite(tiny_run, capsys):
    main(["--run", str(tiny_run), "--batch-size", "2", "--device", "cpu"])
    out = json.loads((tiny_run / "diagnostics.json").read_text())
    assert out["run"] == "xsa-layer0" and out["batch"]["batch_size"] == 2 and out["batch"]["split"] == "val"
    # the arm in full, variant and gate included
    assert {k: out[k] for k in ("arm", "xsa_alpha", "xsa_layers", "xsa_variant", "xsa_gate")} == dict(
        arm="smoke_xsa1-0-checkpoint_every1000-eval_every1000", xsa_alpha=1.0, xsa_layers="0",
        xsa_variant="xsa", xsa_gate=False)
    assert len(out["layers"]) == 2
    for layer in out["layers"]:
        assert {"cos_y_v", "cos_z_v", "diag_mass", "entropy", "cos_v_v", "xsa_alpha", "heads"} <= set(layer)
        assert len(layer["heads"]["diag_mass"]) == 2
    on, off = out["layers"]
    assert on["xsa_alpha"] == 1.0 and abs(on["cos_z_v"]) < 1e-5
    assert off["xsa_alpha"] == 0.0 and off["cos_z_v"] == off["cos_y_v"]
    with pytest.raises(SystemExit):
        main(["--run", str(tiny_run), "--batch-size", "2"])
    assert "exists" in capsys.readouterr().err


def test_figures_are_written_as_png_and_svg(tiny_run, tmp_path):
    main(["--run", str(tiny_run), "--batch-size", "2", "--out", str(tmp_path / "d.json")])
    diag = json.loads((tmp_path / "d.json").read_text())
    paths = [plot_layer_curves({"a": diag, "b": diag}, tmp_path / "fig", "layers"),
             plot_head_heatmap(diag, tmp_path, "heads")]
    paths += [p.with_suffix(".svg") for p in paths]
    assert sorted(p.suffix for p in paths) == [".png", ".png", ".svg", ".svg"]
    assert all(p.stat().st_size > 0 for p in paths)
    first = {p: p.read_bytes() for p in paths}  # the package's one saver: byte-stable figures
    plot_head_heatmap(diag, tmp_path, "heads")
    assert (tmp_path / "heads.svg").read_bytes() == first[tmp_path / "heads.svg"]


def test_figures_are_redrawn_from_a_committed_record_without_its_checkpoint(tmp_path, capsys):
    # per-run figures are not committed; --figures draws them again from diagnostics.json alone
    run = Path(__file__).resolve().parents[1] / "results" / "runs" / "cpu-w64-d4_base_s0"
    main(["--run", str(run), "--figures", str(tmp_path / "fig")])
    assert sorted(p.name for p in (tmp_path / "fig").iterdir()) == sorted(
        f"diagnostics_{k}_cpu-w64-d4_base_s0.{x}" for k in ("heads", "layers") for x in ("png", "svg"))
    with pytest.raises(SystemExit):
        main(["--run", str(tmp_path), "--figures", str(tmp_path / "fig")])
    assert "diagnostics.json: no such file" in capsys.readouterr().err


def test_cli_out_a_folder_is_refused_without_advice_to_overwrite(tiny_run, tmp_path, capsys):
    (tmp_path / "keep.txt").write_text("x")
    for extra in ([], ["--overwrite"]):
        with pytest.raises(SystemExit):
            main(["--run", str(tiny_run), "--out", str(tmp_path), *extra])
        err = capsys.readouterr().err
        assert "is a folder" in err and "--overwrite" not in err.split("error:")[-1]
    assert (tmp_path / "keep.txt").read_text() == "x"


def test_cli_names_a_missing_run(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--run", str(tmp_path / "nope")])
    assert "nope" in capsys.readouterr().err


def test_notebook_is_stored_clean_and_runs(tiny_run, tmp_path):
    import nbformat
    import papermill as pm
    from xsa.base.records import REPO_ROOT
    path = REPO_ROOT / "notebooks" / "03_diagnostics.ipynb"
    nb = nbformat.read(str(path), as_version=4)
    assert any("parameters" in c.metadata.get("tags", []) for c in nb.cells)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")
    pm.execute_notebook(str(path), str(tmp_path / "out.ipynb"), kernel_name="python3", progress_bar=False,
                        parameters=dict(runs=[str(tiny_run)], batch_size=2, device="cpu", out_dir=str(tmp_path)))
    assert json.loads((tiny_run / "diagnostics.json").read_text())["layers"]
    assert (tmp_path / "diagnostics_heads_xsa-layer0.svg").exists()
