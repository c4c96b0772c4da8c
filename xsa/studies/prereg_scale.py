"""
The scale study's pre-registration (python -m xsa.prereg --study scale), generated from its
definition (xsa/studies/scale.py), its rules (xsa/studies/rules.py) and its model (xsa/studies/predict.py), and sized
by the robust study's primary pairs at tuned learning rates.
"""

from __future__ import annotations

from pathlib import Path

from xsa.studies.rules import detectable, half_width, slope_detectable
from xsa.studies.predict import (ANCHORS, AXES, D12_HALF_WIDTH, FIT_ROBUST, FIT_SCALE, GPU_PAIR_SD, SENSITIVITY, TARGETS,
                         condition, pairs_to_test)
from xsa.stack.presets import scaling_params
from xsa.studies.registry import get_study
from xsa.studies.scale import (PAIRS, PRECISION_X4, ROBUST_HEADS_SEEDS, ROBUST_LR, ROBUST_PRIMARY_SEEDS,
                             S4_PAIRS, SECONDARY, SELECT)

def _level(pair) -> str:
    cfg = pair.b.config()
    m = cfg.model
    steps = cfg.num_tokens // cfg.total_batch_size
    return (f"width {m.n_embd}, {m.n_head} head{'s' if m.n_head > 1 else ''} of {m.head_dim}, {m.n_layer} layers, "
            f"{steps} steps, T = {m.sequence_len}, {cfg.num_tokens / scaling_params(m):.2f} tokens per scaling "
            f"parameter")


def _design(study) -> list[str]:
    lines = []
    for c in (*study.main, *study.comparisons):
        if hasattr(c, "a"):
            lr = c.a.get("matrix_lr"), c.b.get("matrix_lr")
            lines.append(f"- **{c.name}**: `{c.a.name}` against `{c.b.name}`; {_level(c)}; matrix LR "
                         f"{lr[0]:g} / {lr[1]:g} (baseline / other arm)")
    lines += [f"- **{name}**: declared once its LR bracket has selected (rules below)" for name in study.pending]
    return lines


def _sd(results: Path) -> tuple[float, int]:
    """The per-pair SD of the relative effect over the robust primary's pairs at tuned LRs."""
    study = get_study("scale", results)
    c = condition(results, study.comparison("length x1"), ROBUST_PRIMARY_SEEDS)
    if c.n < 2:  # no spread to size the design by: never a document that says 0.00%
        raise ValueError(f"{results / 'runs'} holds {c.n} pair(s) of the robust primary at tuned LRs (seeds "
                         f"{ROBUST_PRIMARY_SEEDS[0]}-{ROBUST_PRIMARY_SEEDS[-1]}), whose spread sizes the design; "
                         "at least 2 are needed")
    m = c.mean
    return (sum((d - m) ** 2 for d in c.diffs) / (c.n - 1)) ** 0.5, c.n


def _test_and_power(sd: float, n_sd: int) -> list[str]:
    """The sections on the d12 test, the priorities and what the design can detect."""
    n_gpu = pairs_to_test(GPU_PAIR_SD, D12_HALF_WIDTH)
    return [
        "## The test of the prediction", "",
        f"A d12 pair on a GPU is far less noisy than a CPU pair: about 0.03% per run in modded-nanogpt's "
        f"repeated runs, so about {100 * GPU_PAIR_SD:.3f}% per pair (assumed; ours at CPU scale: {100 * sd:.2f}%). "
        f"{n_gpu} pairs give a 95% interval of at most +/-{100 * D12_HALF_WIDTH:.1f}% at that SD (pairs are added "
        "four at a time while the half-width is larger, at most 16). The prediction fails if that interval lies "
        "outside the prediction interval.", "",
        "## Priorities where the budget binds", "",
        "Length x4 (bracket, then its pairs) > heads (brackets, then pairs) > lengths x2 and x1/3 > the gate > width "
        "256. Runs are declared in that order (the brackets of a later step early where they need no earlier "
        "decision); a level not reached is reported as not run.", "",
        "## What the design can detect", "",
        f"At the per-pair SD of the robust primary at tuned LRs ({100 * sd:.2f}% over {n_sd} pairs):", "",
        f"- length x4: {PRECISION_X4.first} pairs give a half-width of about "
        f"{100 * half_width(PRECISION_X4.first, sd):.2f}%, {PRECISION_X4.most} pairs "
        f"{100 * half_width(PRECISION_X4.most, sd):.2f}%;",
        f"- one level ({len(PAIRS)} pairs): {100 * detectable(len(PAIRS), sd):.2f}% with 80% power;",
        f"- the slope per doubling of heads over 1, 2, 4, 8 heads with {len(PAIRS)} pairs each, at tau = 0: "
        f"{100 * slope_detectable(len(PAIRS), sd, lengths=(1, 2, 4, 8)):.2f}% with 80% power; the slope per "
        "doubling of tokens per parameter over the four lengths, likewise: "
        f"{100 * slope_detectable(len(PAIRS), sd, lengths=(1.14, 3.43, 6.86, 13.7)):.2f}% (a between-condition "
        "variance widens both).", "",
    ]


def scale_document(results: Path) -> str:
    empty = results / ".prereg-empty"  # what the study declares before any record of its own
    study = get_study("scale", empty)
    sd, n_sd = _sd(results)
    seeds = lambda r: f"{r.start}..{r.stop - 1}"
    lines = [
        "# Pre-registration: the `scale` study", "",
        # the modules as they were named when this registration was committed (8c19852); they now live in
        # xsa/studies/ (scale.py, rules.py, predict.py), and the registered text stays as it was
        "Generated by `python -m xsa.prereg --study scale` from `xsa/study_scale.py`, `xsa/design.py` and "
        "`xsa/predict.py` (the model and the prediction, committed with this file); committed before the study's "
        "first run. Scale: " + study.scale + ".", "",
        "## Question", "",
        "At tuned learning rates XSA lowers final val bpb at CPU scale (robust study: about -0.6% with one head of "
        "64). How does that effect move with training length (tokens per parameter) and with the number of "
        "heads, and what does it predict for nanochat's d12 (12 heads of 64, about 10.5 tokens per parameter, "
        "T = 2048), where the seed paper reports -0.32%?", "",
        "## Arms and levels", "",
        "Every run trains on the compiled CPU path (fp32, torch.compile), one thread. XSA is alpha 1 on every "
        f"layer unless named. Seeds from {SELECT.seeds[0]} on are new to this study; seeds "
        f"{SELECT.seeds[0]}..{SELECT.seeds[-1]} only select learning rates and never enter an estimate; the "
        f"estimates use seeds from {PAIRS.start} on, except the two levels whose records the robust study made "
        f"(x1: seeds {seeds(ROBUST_PRIMARY_SEEDS)}; 2 heads: seeds {seeds(ROBUST_HEADS_SEEDS)}), which are reused "
        "as they are.", "",
        *_design(study), "",
        "## Rules (each with its maximum)", "",
        f"- **LR brackets** (length x4; 1 and 8 heads), each arm separately: {SELECT.describe()}",
        f"- **learning rates elsewhere**: length x1/3 and x1 at the robust study's selection ({ROBUST_LR:g}, both "
        "arms); length x2 at each arm's x4 selection; 4 heads at each arm's 8-head selection; 2 heads at the robust "
        f"study's selection ({ROBUST_LR:g}); the gate arm at its XSA arm's LR; width 256 at {ROBUST_LR:g} (not "
        "tuned there: those two levels enter only the sensitivity fit).",
        f"- **primary seeds** (length x4): {PRECISION_X4.describe()}",
        f"- **other levels**: {len(PAIRS)} pairs (seeds {seeds(PAIRS)}); width 256: {len(S4_PAIRS)} pairs "
        f"(seeds {seeds(S4_PAIRS)}); fixed in advance.", "",
        "## Primary endpoint", "",
        "Final val bpb at length x4 (1,536 steps, 13.7 tokens per scaling parameter, the level nearest "
        "nanochat's 10.5-12): XSA minus baseline, relative, paired by seed, 95% t-interval; the verdict says whether "
        "the interval excludes zero and the seed paper's -0.32%.", "",
        "## The model and the prediction (xsa/predict.py)", "",  # its name at registration
        "Per pair, d = (XSA - baseline) / baseline. With H heads, D tokens per scaling parameter and T the "
        "sequence length: d = b0 + bH log2 H + bD log2 D + bT log2(T / 512) + u + e, with u ~ N(0, tau^2) per "
        "condition and e ~ N(0, sigma^2) per pair. sigma^2 is pooled within conditions; tau^2 by REML on the "
        "condition means on a fixed grid; the coefficients by generalised least squares at that tau^2; intervals "
        "with Student's t at k - 4 degrees of freedom (k conditions).",
        "",
        "- Fitted on: " + ", ".join(f"`{n}`" for n in FIT_SCALE) + " of this study and "
        + ", ".join(f"`{n}`" for n in FIT_ROBUST) + " of the robust study (seeds 100..105); a condition enters "
        "with at least two pairs.",
        "- Sensitivity fit: the same with " + ", ".join(f"`{n}`" for n in SENSITIVITY) + " added.",
        "- Predictions, as 95% intervals for the condition's true effect: " + "; ".join(
            f"{k} ({t['heads']} heads, {t['tokens_per_param']:g} tokens per parameter, T = {t['seq_len']})"
            for k, t in TARGETS.items()) + ".",
        "- Stated as conditional on: no dependence on width or depth beyond the modelled axes ("
        + ", ".join(AXES) + "); linearity in the logs; extrapolation past 8 heads and T = 1024.",
        "- Printed beside it, not fitted: " + "; ".join(f"{src} ({what}): about {100 * eff:+.2f}%"
                                                       for src, what, eff in ANCHORS) + ".", "",
        "## Secondary family", "",
        *[f"- {s}" for s in SECONDARY], "",
        "Multiplicity: Holm at a family-wise 5% over this family (the two slopes by their model t-statistics at "
        "k - 4 degrees of freedom, the rest by paired t-tests of the relative differences; a member not run counts "
        "as p = 1). Descriptive: each level's effect, bT, the learned gate per layer and head (mean and 95% "
        "interval over seeds, from each run's summary), the diagonal attention mass per level, the sensitivity fit.",
        "",
        *_test_and_power(sd, n_sd),
        "## Runs", "",
        f"Declared before any record of this study: {len(study.runs)} runs (the LR brackets, the levels whose "
        "learning rates are fixed in advance, and the reused robust records). The brackets' pairs are declared by the "
        "rules above as the records decide them (`make study STUDY=scale`).", "",
    ]
    return "\n".join(lines)
