"""The sink study: its design as data (the arms without a mechanism are the factorial's runs), its
registered analysis recovering an interaction planted in made-up run records (so that the decision
can come out "sink", "partly" or "not sink"), and its registration rendering without its own records."""

from __future__ import annotations

import json
import random

import pytest

from xsa.studies.factorial.design import factorial_study
from xsa.studies import sink_analysis as S
from xsa.studies.sink import CONDITIONS, MECHANISMS, contrast_names, decision_names, ordered_runs, sink_study
from xsa.studies.sink_prereg import new_runs, sink_document


def _write(results, run, bpb, entropy1=3.5, extra=None):
    """A finished run: summary.json (CPU time 0.5 s a step without a mechanism, 1 s with one) and a
    metrics log with evaluations at step 0, 96 and the last step, layer 1's entropy at `entropy1` at the
    last one (4.0 at step 96)."""
    d = results / "runs" / run.run_id
    d.mkdir(parents=True, exist_ok=True)
    steps = run.config().num_iterations
    cpu = steps * (1.0 if extra else 0.5)
    (d / "summary.json").write_text(json.dumps(dict(complete=True, val_bpb=bpb, steps=steps, cpu_time_s=cpu)))
    lines = []
    for step, e1 in ((0, 4.3), (96, 4.0), (steps, entropy1)):
        diag = dict(entropy=[3.0, e1, 3.0, 3.0], diag_mass=[0.1] * 4, first_mass=[0.01] * 4, cos_y_v=[0.5] * 4,
                    **(extra or {}))
        lines.append(json.dumps(dict(step=step, val_bpb=bpb, diag=diag)))
    (d / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def _plant(results, keep, seed=0, factorial_only=False):
    """Records for every run of the study: XSA's gain G about -1%; with a mechanism XSA keeps `keep` of
    it (0.1: a sink takes 90% of it; 1: no sink). The baselines without a mechanism are diffuse on all
    but two seeds, with one always sharp."""
    rng, noise = random.Random(seed), random.Random(seed + 1)  # the factorial's records alike either way
    for c in CONDITIONS:
        for i, s in enumerate(c.seeds):
            base, gain = 2.0 + rng.gauss(0, 0.01), -0.01 + rng.gauss(0, 0.001)
            none = c.pair("none")
            _write(results, none.a.run(s), base, entropy1=3.5 if i < 8 else 2.0)
            _write(results, none.b.run(s), base * (1 + gain), entropy1=2.5)
            if factorial_only:
                continue
            for m in c.mechanisms[1:]:
                p, own = c.pair(m), 0.002 + noise.gauss(0, 0.0005)
                extra = dict(attn_logit_max=[5.0] * 4, **{"gate_mean" if m == "gate" else "sink_mass": [0.3] * 4})
                _write(results, p.a.run(s), base * (1 + own), entropy1=2.0, extra=extra)
                _write(results, p.b.run(s), base * (1 + own) * (1 + keep * gain + noise.gauss(0, 0.001)),
                       entropy1=2.0, extra=extra)


# -----------------------------------------------------------------------------
# The design

def test_the_design_crosses_two_mechanisms_with_xsa_on_the_factorials_seeds():
    study = sink_study()
    assert len(study.runs) == 3 * 2 * 10 * 3 + 2 * 2 * 10 == 220 == len({r.run_id for r in study.runs})
    assert sum(len(new_runs(c)) for c in CONDITIONS) == 140
    assert study.name == "sink" and study.diagnostics is None and study.core_arms == () and not study.final
    assert study.primary == "w64 short at 0.04, gate" and len(decision_names()) == 4 and len(contrast_names()) == 21
    assert [p.name for p in study.main][:3] == ["w64 short at 0.04, none", "w64 short at 0.04, gate",
                                                "w64 short at 0.04, sink"]
    assert len(study.main) == 11 and study.secondary == tuple(contrast_names())


def test_the_arms_without_a_mechanism_are_the_factorials_runs():
    factorial = {r.run_id for r in factorial_study().runs}
    ours = {r.run_id for r in sink_study().runs}
    for c in CONDITIONS:
        none = {arm.run(s).run_id for arm in c.pair("none").arms() for s in c.seeds}
        assert len(none) == 20 and none <= factorial and none <= ours
        assert not {r.run_id for r in new_runs(c)} & factorial


def test_every_new_run_has_its_mechanism_rate_and_seed():
    for c in CONDITIONS:
        for m, p in c.pairs().items():
            for alpha, arm in zip((0.0, 1.0), p.arms()):
                for s in c.seeds:
                    cfg = arm.run(s).config()
                    assert cfg.model.attn_gate == (m == "gate") and cfg.model.attn_sink == (m == "sink")
                    assert (cfg.preset, cfg.matrix_lr, cfg.seed, cfg.cpu_compile) == (c.preset, c.rate, s, True)
                    assert cfg.model.xsa_alpha == alpha
                    assert cfg.num_iterations == c.config().num_iterations
    assert [m for m in CONDITIONS[-1].mechanisms] == ["none", "gate"]
    assert set(MECHANISMS) == {"none", "gate", "sink"}


def test_runs_train_seed_by_seed_across_the_conditions():
    runs = ordered_runs()
    rank = {c.name: {s: k for k, s in enumerate(c.seeds)} for c in CONDITIONS}
    ks = []
    for r in runs:
        c = next(c for c in CONDITIONS if r.preset == c.preset and r.config().matrix_lr == c.rate)
        ks.append(rank[c.name][r.seed])
    assert ks == sorted(ks)  # the k-th seed of every condition before the (k+1)-th of any
    assert len(runs) == len(sink_study().runs)  # no run declared twice


# -----------------------------------------------------------------------------
# The analysis

@pytest.mark.parametrize("keep, expected", [(0.1, "sink"), (0.7, "partly"), (1.0, "not sink")])
def test_the_decision_recovers_a_planted_interaction(tmp_path, keep, expected):
    _plant(tmp_path, keep)
    family = S.decision_family(tmp_path)
    assert family["gate, pooled: interaction"]["n"] == 20 and family["sink, pooled: interaction"]["n"] == 20
    assert family["gate, pooled: interaction"]["value"] == pytest.approx(0.01 * (1 - keep), abs=0.0015)
    assert {m: d["outcome"] for m, d in S.decision(tmp_path).items()} == {"gate": expected, "sink": expected}
    assert S.decision(tmp_path)["gate"]["says"] == S.OUTCOMES[expected]


def test_the_outcome_table():
    up, down, zero = (dict(value=v, holm_p=p) for v, p in ((0.01, 0.001), (-0.01, 0.001), (0.001, 0.5)))
    assert S.outcome(up, dict(value=0.0, holm_p=1.0)) == "sink"
    assert S.outcome(up, dict(value=-0.001, holm_p=0.5)) == "undecided"
    assert S.outcome(up, down) == "partly"
    assert S.outcome(zero, down) == "not sink"
    assert S.outcome(down, down) == "opposite"
    assert S.outcome(zero, zero) == "undecided"
    assert S.outcome(dict(value=None, holm_p=None), dict(value=None, holm_p=None)) == "undecided"


def test_estimates_hold_every_family_the_mode_split_and_the_readouts(tmp_path):
    _plant(tmp_path, keep=0.1)
    e = S.estimates(tmp_path)
    json.dumps(e, allow_nan=False)
    assert e["declared"] == e["finished"] == 220 and not e["interim"]
    assert list(e["contrasts"]) == contrast_names()
    assert all(v["holm_p"] is not None for v in e["contrasts"].values())
    rate = e["contrasts"]["w64 short at 0.04: diffuse rate gate"]
    # 8 of 10 baselines diffuse without the gate, none with it: 8 discordant seeds, p = 2 / 2^8
    assert (rate["rate_without"], rate["rate_with"], rate["value"], rate["n"]) == (0.8, 0.0, -0.8, 10)
    assert rate["p"] == pytest.approx(2 / 2 ** 8) and rate["early_entropy"]["without"]["value"] == pytest.approx(4.0)
    own = e["contrasts"]["w64 long at 0.04: own effect sink"]
    assert own["value"] == pytest.approx(0.002, abs=0.0005) and own["holm_p"] < 0.05
    split = e["mode_split"]["w64 short at 0.04, none"]
    assert split["diffuse"]["n"] == 8 and split["sharp"]["n"] == 2
    assert "factorial w128 short@0.08" in e["mode_split"]
    assert e["early_entropy"]["exploratory"] and "w128 long at 0.08, gate" in e["early_entropy"]["pairs"]
    read = e["readouts"]["w64 short at 0.04, gate"]
    assert read["xsa"]["gate_mean"]["value"] == pytest.approx([0.3] * 4) and read["xsa"]["gate_mean"]["n"] == 10
    assert read["xsa"]["sink_mass"] == dict(value=None, n=0)
    # records from before the new keys existed: missing, not an error
    assert e["readouts"]["w64 short at 0.04, none"]["baseline"]["attn_logit_max"] == dict(value=None, n=0)


def test_estimates_of_an_empty_or_partial_results_folder(tmp_path):
    e = S.estimates(tmp_path)
    assert e["finished"] == 0 and e["interim"]
    assert {m: d["outcome"] for m, d in e["decision"]["outcomes"].items()} == {"gate": "undecided",
                                                                               "sink": "undecided"}
    _plant(tmp_path, keep=0.1, factorial_only=True)
    e = S.estimates(tmp_path)
    assert e["finished"] == 80 and e["effects"]["w64 long at 0.04, none"]["n"] == 10
    assert e["decision"]["family"]["gate, pooled: interaction"]["n"] == 0
    json.dumps(e, allow_nan=False)


# -----------------------------------------------------------------------------
# The registration

def test_the_registration_renders_without_any_record(tmp_path):
    text = sink_document(tmp_path)
    assert text.startswith("# Pre-registration: the `sink` study") and "n/a" in text
    for needle in ("## Decision family", "## Contrast family", "## Power", "McNemar", "exploratory",
                   S.OUTCOMES["sink"], S.OUTCOMES["not sink"], "220 runs in all", "the other 140 are new"):
        assert needle in text


def test_the_registration_does_not_read_the_studys_own_records(tmp_path):
    factorial_only, everything = tmp_path / "a", tmp_path / "b"
    _plant(factorial_only, keep=0.1, factorial_only=True)
    _plant(everything, keep=1.0)
    text = sink_document(factorial_only)
    assert "| w64 short at 0.04 | 10 |" in text  # the power table read the factorial's planted pairs
    assert "at 0.500 s a step" in text  # and the CPU time the factorial's records alone
    assert sink_document(everything) == text
