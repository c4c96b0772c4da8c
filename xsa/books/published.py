"""
Published results on XSA, typed once as data (each as its source reports it), for the paper's related
work; the text places them by key (`pub.<key>.<field>`) and never types them. Each entry names its
source, what it compares, how many runs per arm, at what scale, and the numbers it reports. Where a
source does not state a value, the field is absent: nothing here is inferred.
"""

from __future__ import annotations

PUBLISHED: dict[str, dict] = {
    "zhai": dict(source="arXiv:2603.09078 (abstract)", contrast="XSA against standard attention",
                 optimizer="AdamW", largest_params_b=2.7),
    "nanochat_702": dict(source="karpathy/nanochat pull request #702", contrast="XSA against none, d14, one A100",
                         runs_per_arm=1, depth=14, bpb_xsa=0.835, bpb_base=0.838, hours_xsa="3 h 34 min",
                         hours_base="3 h 23 min", wallclock_up=0.054),
    "nanochat_708": dict(source="karpathy/nanochat pull request #708", contrast="XSA against none", runs_per_arm=0),
    "modded_260": dict(source="KellerJordan/modded-nanogpt pull request #260", contrast="fixed XSA on 3 layers",
                       layers=3, target_loss=3.28),
    "modded_264": dict(source="KellerJordan/modded-nanogpt pull request #264",
                       contrast="gated XSA (tanh, from 0) on 6 layers at 1,410 steps against none at 1,440",
                       runs_per_arm=10, layers=6, steps_xsa=1410, steps_base=1440, loss_xsa=3.2787,
                       loss_base=3.2794, p=0.0014, params_m=124),
    "modded_317": dict(source="KellerJordan/modded-nanogpt pull request #317",
                       contrast="sparse attention gates removed beside gated XSA", runs_per_arm=10,
                       seconds_saved_1gpu=17.33),
    "golf_265": dict(source="openai/parameter-golf pull request #265",
                     contrast="fixed XSA on the last 3 of 11 layers against a baseline it does not state",
                     runs_per_arm=1, layers=3, of_layers=11, bpb=-0.002),
    "golf_609": dict(source="openai/parameter-golf pull request #609", contrast="XSA on all layers against the last 4",
                     bpb=-0.0016),
    "golf_1125": dict(source="openai/parameter-golf pull request #1125",
                      contrast="XSA on all layers against the last 4, one RTX 5090", runs_per_arm=1, bpb=-0.0018),
    "marin_4772": dict(source="marin-community/marin issue #4772", contrast="no XSA against XSA, d512 and d768",
                       runs_per_arm=1),
    "marin_5301": dict(source="marin-community/marin issue #5301", contrast="learnable XSA against fixed XSA",
                       finding="the learnable form worse than the fixed one"),
    "marin_9288": dict(source="marin-community/marin issue #9288", contrast="XSA against none on marin's newer recipe",
                       finding="no real gain from XSA"),
    "modded_117": dict(source="KellerJordan/modded-nanogpt pull request #117", contrast="sparse attention gates added"),
    "marin_5854": dict(source="marin-community/marin issue #5854",
                       contrast="no XSA (with a context norm) against XSA, d512 and d768", runs_per_arm=1,
                       loss_up_d512=0.0189, loss_up_d768=0.0139, faster_d512=0.108, faster_d768=0.144,
                       speedup_d512=1.0124, speedup_d768=1.0558, loss_xsa_d512=3.8104, loss_xsa_d768=3.4339,
                       flops_d512=2.19e17, flops_d768=1.70e18),
}
