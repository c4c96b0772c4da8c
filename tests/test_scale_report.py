"""The scale study's estimates and figure (xsa/report/scale.py) on the committed robust records plus
made-up scale records whose effect follows a known line in log2 heads and log2 tokens per parameter:
the fit recovers the slopes, predicts d12 inside its interval, and the secondary family is Holm-adjusted."""

import math
import shutil

import pytest

from xsa.records import REPO_ROOT
from xsa.report.scale import fig_scale, scale_estimates
from xsa.studies import get_study

from test_scale_study import record


def effect(cfg):
    """The made-up effect: -0.6% at 1 head and 3.43 tokens per parameter, +0.1 point per doubling of
    heads, -0.05 point per doubling of tokens per parameter (the gate halves XSA's effect)."""
    from xsa.presets import scaling_params
    m = cfg.model
    d = cfg.num_tokens / scaling_params(m)
    return -0.006 + 0.001 * math.log2(m.n_head) - 0.0005 * math.log2(d / 3.43)


def bpb(run):
    cfg = run.config()
    base = 2.0 + 0.001 * (run.seed % 7) + 0.01 * abs(math.log2(cfg.matrix_lr / 0.08))
    if cfg.model.xsa_gate:
        return base * (1 + 0.5 * effect(cfg))
    return base * (1 + effect(cfg)) if cfg.model.xsa_layers != "none" else base


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("results")
    runs = REPO_ROOT / "results" / "runs"
    shutil.copytree(runs, out / "runs", ignore=lambda d, names: [n for n in names if d == str(runs)
                                                                 and not n.startswith("cpu-w")])
    for _ in range(4):  # the brackets select, then their pairs are declared
        for run in get_study("scale", out).runs:
            if not (out / "runs" / run.run_id / "summary.json").exists():
                record(out, run, bpb(run) * (1 + 0.0005 * math.sin(run.seed)))
    return out


def test_the_fit_recovers_the_made_up_slopes_and_the_family_is_holm_adjusted(results, tmp_path):
    est = scale_estimates(results)
    assert est["length x4"]["status"] == "complete" and est["length x4"]["n"] == 8
    assert est["fit"]["df"] == 10 - 4
    heads = est["slope per doubling of heads"]
    assert heads["lo"] < 0.001 < heads["hi"]
    tokens = est["slope per doubling of tokens per parameter"]
    assert tokens["value"] == pytest.approx(-0.0005, abs=2e-4)
    d12 = est["prediction d12"]
    assert d12["lo"] < d12["value"] < d12["hi"] and d12["heads"] == 12
    assert all(est[k].get("p_holm") is not None for k in ("slope per doubling of heads", "gate at width 64",
                                                          "width 256, 128 steps"))
    assert est["gate at width 64"]["value"] > 0  # the made-up gate keeps only half of XSA's gain
    assert est["T=512"]["n"] == 6 and est["T=256"]["seq_len"] == 256
    png = fig_scale(est, tmp_path, -0.0032)
    assert png.exists() and (tmp_path / "scale.svg").exists()
