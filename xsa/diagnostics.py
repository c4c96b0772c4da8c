"""
Mechanistic diagnostics of self-attention: does XSA do what it claims?

XSA removes, per head and token, the component of the attention output y_i along the token's own
value v_i. So with XSA on (alpha = 1) the output after the projection, z_i, is orthogonal to v_i.
For one model and one fixed validation batch we measure, per layer and head:

  cos_y_v    mean_i cos(y_i, v_i)   attention output vs the token's own value, before XSA
  cos_z_v    mean_i cos(z_i, v_i)   the same after XSA (equal to cos_y_v where XSA is off)
  diag_mass  mean_i a_ii            attention a token pays to itself (explicit causal softmax of
                                    the captured q, k: fused kernels return no weights)
  entropy    mean_i H(a_i.)         attention entropy in nats
  cos_v_v    mean_{i != j} cos(v_i, v_j)  similarity of different tokens' values within a sequence,
                                    over all ordered pairs i != j (cosine is symmetric, so this is
                                    also the mean over the causal pairs j < i)

Means run over batch rows and positions 1..T-1. Position 0 is left out: it can attend only to
itself (a_00 = 1, y_0 = v_0), so it says nothing about the model, and under XSA its output is
z_0 = v_0 * eps / (||v_0||^2 + eps), a vector of size ~1e-8 whose cosine with v_0 is rounding noise.
Under GQA a value head is shared by n_head/n_kv_head
query heads; per-head lists are always indexed by query head, so all have length n_head.

The math functions take tensors (no model) so they can be tested on hand-built inputs.
`diagnostics_snapshot(model, x)` is the cheap hook training calls every k steps;
`python -m xsa.diagnostics --run RUN_DIR` writes RUN_DIR/diagnostics.json for a trained run.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from xsa.runs.load import load_model, run_data_dir
from xsa.stack.checkpoint import weights_sha256
from xsa.base.common import autodetect_device, device_name
from xsa.data.loader import val_batches
from xsa.data.shards import check_files
from xsa.runs.plot import new_figure, save_figure
from xsa.base.records import DIAGNOSTIC_METRICS, atomic_write_json, check_out, provenance, read_json
from xsa.base.runlock import own_run
from xsa.stack.spec import arm_record
from xsa.stack.step import Precision

METRICS = DIAGNOSTIC_METRICS
# per layer beside METRICS, where a layer has them: the largest pre-softmax attention logit (every layer),
# the sink's mean weight (attn_sink) and the output gate's mean (attn_gate); a layer's value is the
# mean over heads except the logit, which is the largest head's
EXTRA_METRICS = ("attn_logit_max", "sink_mass", "gate_mean")
METRIC_LABELS = {
    "cos_y_v": r"cos($y_i$, $v_i$) before XSA",
    "cos_z_v": r"cos($z_i$, $v_i$) after XSA",
    "diag_mass": r"diagonal attention mass $a_{ii}$",
    "first_mass": r"attention on the first token $a_{i0}$",
    "entropy": "attention entropy (nats)",
    "cos_v_v": r"cos($v_i$, $v_j$), $i \neq j$",
}

# -----------------------------------------------------------------------------
# Core math on tensors. Layouts follow the model's capture: q, k, v as (B, H, T, D); y, z as (B, T, H, D).


def expand_kv(v: torch.Tensor, n_head: int) -> torch.Tensor:
    """(B, Hkv, T, D) -> (B, H, T, D): query head h reads value head h // (H // Hkv), as SDPA's GQA."""
    n_kv = v.size(1)
    return v if n_kv == n_head else v.repeat_interleave(n_head // n_kv, dim=1)


def self_cosine(y: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Mean cos(y_i, v_i) per head. y (B, T, H, D), v (B, Hkv, T, D) -> (H,)."""
    y = y.float().transpose(1, 2)[:, :, 1:]  # (B, H, T-1, D), position 0 left out (see top)
    v = expand_kv(v.float(), y.size(1))[:, :, 1:]
    return F.cosine_similarity(y, v, dim=-1, eps=1e-12).mean(dim=(0, 2))


def value_cosine(v: torch.Tensor, n_head: int) -> torch.Tensor:
    """Mean cos(v_i, v_j) over ordered pairs i != j of one sequence, per query head -> (H,).

    With unit vectors u_i, sum_{i,j} <u_i, u_j> = ||sum_i u_i||^2, so the off-diagonal mean is
    (||sum u||^2 - T) / (T (T - 1)): O(T D) instead of a T x T matrix.
    """
    T = v.size(2)
    if T < 2:
        raise ValueError("value_cosine needs sequences of at least 2 tokens")
    u = F.normalize(v.float(), dim=-1, eps=1e-12)  # (B, Hkv, T, D)
    total = u.sum(dim=2).pow(2).sum(dim=-1)  # (B, Hkv)
    diag = u.pow(2).sum(dim=(-1, -2))  # T for nonzero vectors, less if some value is exactly 0
    per_kv = ((total - diag) / (T * (T - 1))).mean(dim=0)  # (Hkv,)
    return per_kv.repeat_interleave(n_head // v.size(1))


def attention_scores(q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    """Causal scale * q k^T in fp32, -inf above the diagonal. q (B, H, T, D), k (B, Hkv, T, D) -> (B, H, T, T)."""
    q, k = q.float(), expand_kv(k.float(), q.size(1))
    T = q.size(2)
    scores = (q @ k.transpose(-1, -2)) * scale
    causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    return scores.masked_fill(~causal, float("-inf"))


def attention_probs(q: torch.Tensor, k: torch.Tensor, scale: float, sink: torch.Tensor | None = None) -> torch.Tensor:
    """Causal softmax(scale * q k^T) in fp32, (B, H, T, T). With a layer's sink logits (H,) (config.attn_sink)
    the softmax also runs over the sink, whose column is dropped: a row then sums to 1 minus its sink weight."""
    scores = attention_scores(q, k, scale)
    if sink is None:
        return scores.softmax(dim=-1)
    B, H, T, _ = scores.shape
    column = sink.float().view(1, H, 1, 1).expand(B, H, T, 1)
    return torch.cat([scores, column], dim=-1).softmax(dim=-1)[..., :-1]


def logit_max(scores: torch.Tensor) -> torch.Tensor:
    """The largest pre-softmax attention logit per head over the causal positions. (B, H, T, T) -> (H,).
    QK-norm bounds it by qk_scale^2 * sqrt(head_dim): the logit growth of Wortsman et al. (2023) that
    nanochat's QK-norm is meant to hold."""
    return scores.amax(dim=(0, 2, 3))


def diagonal_mass(att: torch.Tensor) -> torch.Tensor:
    """Mean a_ii per head over positions 1..T-1. att (B, H, T, T) -> (H,)."""
    return att.diagonal(dim1=-2, dim2=-1)[:, :, 1:].mean(dim=(0, 2))


def first_token_mass(att: torch.Tensor) -> torch.Tensor:
    """Mean a_i0 per head over queries 1..T-1: the attention on the row's first token (<|bos|>), where
    attention sinks usually form. att (B, H, T, T) -> (H,)."""
    return att[:, :, 1:, 0].mean(dim=(0, 2))


def attention_entropy(att: torch.Tensor) -> torch.Tensor:
    """Mean entropy (nats) of the attention rows of queries 1..T-1, per head. att (B, H, T, T) -> (H,)."""
    att = att[:, :, 1:]
    plogp = torch.where(att > 0, att * att.clamp_min(1e-30).log(), torch.zeros_like(att))
    return -plogp.sum(dim=-1).mean(dim=(0, 2))


def capture_stats(cap: dict, scale: float, sink: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """All per-head metrics of one layer from its capture dict -> {metric: (H,) tensor}: METRICS, and
    EXTRA_METRICS where the layer has them (the sink's weight, the output gate's mean)."""
    q, k, v, y, z = cap["q"], cap["k"], cap["v"], cap["y"], cap["z"]
    H = q.size(1)
    # the T x T attention matrix is the only big object: build it one batch row at a time
    mass, first, ent = (torch.zeros(H, device=q.device) for _ in range(3))
    top = torch.full((H,), float("-inf"), device=q.device)
    for b in range(q.size(0)):
        top = torch.maximum(top, logit_max(attention_scores(q[b:b + 1], k[b:b + 1], scale)))
        att = attention_probs(q[b:b + 1], k[b:b + 1], scale, sink)
        mass += diagonal_mass(att)
        first += first_token_mass(att)
        ent += attention_entropy(att)
    out = {
        "cos_y_v": self_cosine(y, v),
        "cos_z_v": self_cosine(z, v),
        "diag_mass": mass / q.size(0),
        "first_mass": first / q.size(0),
        "entropy": ent / q.size(0),
        "cos_v_v": value_cosine(v, H),
        "attn_logit_max": top,
    }
    if "sink_weight" in cap:  # (B, H, T): queries 1..T-1, as every other metric
        out["sink_mass"] = cap["sink_weight"][:, :, 1:].float().mean(dim=(0, 2))
    if "gate" in cap:  # (B, T, H)
        out["gate_mean"] = cap["gate"][:, 1:].float().mean(dim=(0, 1))
    return out


# -----------------------------------------------------------------------------
# Model side: switch capture on, run one forward, reduce.


def softmax_scale(attn, head_dim: int) -> float:
    """The scale the model's SDPA call uses on the captured q, k (1/sqrt(D) unless it says otherwise).

    The model multiplies q and k by QK_SCALE after QK-norm; the captured q, k already include it, and
    SDPA applies its default 1/sqrt(D) on top (checked by test_captured_attention_reproduces_...)."""
    scale = getattr(attn, "softmax_scale", None)
    return float(scale) if scale is not None else 1.0 / math.sqrt(head_dim)


@torch.no_grad()
def layer_stats(model, x: torch.Tensor) -> list[dict]:
    """Per-layer dicts {metric: [per-head floats], "xsa_alpha": float} for one forward pass on x."""
    blocks = model.blocks
    caps = [dict() for _ in blocks]
    was_training = model.training
    model.eval()
    try:
        for block, cap in zip(blocks, caps):
            block.attn.capture = cap
        model(x)
    finally:
        for block in blocks:
            block.attn.capture = None
        model.train(was_training)
    out = []
    for block, cap in zip(blocks, caps):
        stats = capture_stats(cap, softmax_scale(block.attn, cap["q"].size(-1)), block.attn.attn_sink)
        entry = {name: t.tolist() for name, t in stats.items()}
        entry["xsa_alpha"] = float(block.attn.xsa_alpha or 0.0)  # None where XSA is off
        out.append(entry)
        cap.clear()  # free the activations as we go
    return out


def summarize_layers(per_head: list[dict]) -> list[dict]:
    """Add head averages: each layer gets metric -> mean over heads and heads -> {metric: list}."""
    layers = []
    for i, entry in enumerate(per_head):
        heads = {m: entry[m] for m in (*METRICS, *EXTRA_METRICS) if m in entry}
        layer = {"layer": i, "xsa_alpha": entry["xsa_alpha"], "heads": heads}
        layer.update({m: max(v) if m == "attn_logit_max" else sum(v) / len(v) for m, v in heads.items()})
        layers.append(layer)
    return layers


def diagnostics_snapshot(model, x: torch.Tensor) -> dict:
    """Training-time hook: head-averaged metrics per layer on a small fixed batch x (B, T).

    Returns {metric: [one float per layer]}, ready to go into a metrics.jsonl line. Runs under
    no_grad in eval mode and restores the model's mode; costs one forward pass plus B explicit
    T x T softmaxes per layer, so call it every k steps, not every step.
    """
    logits = []  # the output logits before the softcap: lm_head's output (the model caps after it)
    hook = model.lm_head.register_forward_hook(lambda _m, _i, out: logits.append(out.detach().float()))
    try:
        layers = summarize_layers(layer_stats(model, x))
    finally:
        hook.remove()
    snap = {m: [layer[m] for layer in layers] for m in METRICS}
    snap.update({m: [layer[m] for layer in layers] for m in EXTRA_METRICS if m in layers[0]})
    snap["logit_rms"] = logits[0].pow(2).mean().sqrt().item()
    return snap


# -----------------------------------------------------------------------------
# A trained run: load, take the fixed validation batch, write RUN_DIR/diagnostics.json.


def validation_rows(run_dir: Path, train_config, batch_size: int, batches: int, device) -> tuple[list, dict]:
    """The first `batches` batches of the run's deterministic validation stream (the same rows for
    every run of a data subset), and a description of them."""
    data_dir = run_data_dir(read_json(Path(run_dir) / "config.json").get("data_dir"), train_config.data)
    if not (Path(data_dir) / "shards").is_dir():
        raise FileNotFoundError(f"{data_dir}: no validation shards (build them with "
                                f"`python -m xsa.data build --subset {train_config.data}`)")
    check_files(Path(data_dir), full=True, prefix="shards/val_")  # a damaged shard would give other rows
    T = train_config.model.sequence_len
    xs = [x for x, _ in val_batches(Path(data_dir), batch_size=batch_size, seq_len=T,
                                    max_tokens=batches * batch_size * T, device=device)]
    if len(xs) < batches:
        raise ValueError(f"batch_size x batches: the validation split of {data_dir} holds {len(xs)} batches of "
                         f"{batch_size} rows of {T} tokens, {batches} were asked for")
    h = hashlib.sha256()
    for x in xs:
        h.update(x.cpu().numpy().tobytes())
    desc = {"split": "val", "data_dir": str(data_dir), "data": train_config.data, "batch_size": batch_size,
            "batches": batches, "rows": batches * batch_size, "seq_len": T,
            "which": f"first {batches} batches of val_batches", "tokens_sha256": h.hexdigest()}
    return xs, desc


def check_rows(batch_size, batches) -> None:
    for name, value in (("batch_size", batch_size), ("batches", batches)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


def run_diagnostics(run_dir, batch_size: int = 8, batches: int = 1, device: str | None = None) -> dict:
    """Per layer and head, every metric averaged over batch_size x batches validation rows (one
    forward per batch, in the precision policy of training)."""
    check_rows(batch_size, batches)
    t0, c0 = time.time(), time.process_time()
    run_dir = Path(run_dir)
    dev = autodetect_device(device)
    model, _, cfg = load_model(run_dir, dev)
    xs, batch = validation_rows(run_dir, cfg, batch_size, batches, dev)
    with Precision.of(dev, cfg).context():
        stats = [layer_stats(model, x) for x in xs]
    def merged(i: int, m: str, h: int) -> float:  # a head's value over the batches: the largest logit, else the mean
        values = [b[i][m][h] for b in stats]
        return max(values) if m == "attn_logit_max" else sum(values) / len(values)

    per_head = [{m: ([merged(i, m, h) for h in range(len(stats[0][i][m]))] if m in (*METRICS, *EXTRA_METRICS)
                     else stats[0][i][m]) for m in stats[0][i]} for i in range(len(stats[0]))]
    return {
        "run": run_dir.name,
        "run_dir": str(run_dir),
        "weights_sha256": weights_sha256(model.state_dict()),  # binds the record to the run's summary
        "preset": cfg.preset,
        **arm_record(cfg),  # the arm in full: name, overrides, every attention field
        "batch": batch,
        "definitions": {m: METRIC_LABELS[m] for m in METRICS} | {
            "cos_v_v_pairs": "all ordered pairs i != j within a sequence (equal to the causal j < i mean)",
            "entropy_units": "nats", "heads": "indexed by query head (GQA value heads repeated)"},
        "layers": summarize_layers(per_head),
        "provenance": provenance(config_hash=cfg.config_hash(), seed=cfg.seed, device=device_name(dev),
                                 wall_time_s=round(time.time() - t0, 3),
                                 extra={"cpu_time_s": round(time.process_time() - c0, 3)}),
    }


def write_diagnostics(run_dir, out=None, batch_size: int = 8, batches: int = 1, device: str | None = None) -> dict:
    """run_diagnostics, written to `out` (default RUN_DIR/diagnostics.json); returns the record."""
    check_rows(batch_size, batches)
    out = check_out(Path(out) if out else Path(run_dir) / "diagnostics.json", "diagnostics")
    with own_run(run_dir, "diagnostics", shared=True):  # never beside a training of the folder
        result = run_diagnostics(run_dir, batch_size=batch_size, batches=batches, device=device)
        atomic_write_json(out, result)
    return result


# -----------------------------------------------------------------------------
# Figures (PNG + SVG, xsa.report.figures). `records` maps an arm label ("baseline", "XSA") to a diagnostics dict.


def plot_layer_curves(records: dict[str, dict], out_dir, name: str, metrics=METRICS):
    """One panel per metric, x = layer, one line per arm (head-averaged)."""
    fig, axes = new_figure(ncols=len(metrics), figsize=(3.2 * len(metrics), 3.0))
    for ax, m in zip(axes[0], metrics):
        for label, diag in records.items():
            layers = diag["layers"]
            ax.plot([l["layer"] for l in layers], [l[m] for l in layers], marker="o", ms=3, label=label)
        ax.set_title(METRIC_LABELS[m], fontsize=9)
        ax.set_xlabel("layer")
    axes[0][0].legend(fontsize=8)
    return save_figure(fig, out_dir, name)


def plot_head_heatmap(diag: dict, out_dir, name: str, metrics=("cos_y_v", "cos_z_v", "diag_mass", "entropy")):
    """Layer x head heatmaps of one run, one panel per metric."""
    import seaborn as sns  # lazy: optional dependency
    fig, axes = new_figure(ncols=len(metrics), figsize=(3.6 * len(metrics), 0.35 * len(diag["layers"]) + 1.6))
    grids = {m: np.array([l["heads"][m] for l in diag["layers"]]) for m in metrics}
    # the cosines share one diverging scale centred on 0, so XSA's zeros read as zero, not as noise
    cos_max = max([np.abs(g).max() for m, g in grids.items() if m.startswith("cos_")] + [1e-3])
    for ax, m in zip(axes[0], metrics):
        grid = grids[m]
        style = (dict(cmap="vlag", center=0.0, vmin=-cos_max, vmax=cos_max) if m.startswith("cos_")
                 else dict(cmap="viridis"))
        sns.heatmap(grid, ax=ax, annot=grid.size <= 64, fmt=".2f", annot_kws={"fontsize": 6},
                    cbar_kws={"shrink": 0.8}, **style)
        ax.set_title(METRIC_LABELS[m], fontsize=9)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
    fig.suptitle(f"{diag.get('run', '')} (xsa_alpha={diag.get('xsa_alpha')})", fontsize=9)
    return save_figure(fig, out_dir, name)


# -----------------------------------------------------------------------------


def draw_from_record(p: argparse.ArgumentParser, run_dir: Path, out_dir: Path) -> None:
    """A run's figures are derived from its committed diagnostics.json, so they are not committed
    themselves (about 0.3 MB a run): this redraws them, as the diagnostics notebook does."""
    try:
        diag = read_json(run_dir / "diagnostics.json")
    except (ValueError, OSError) as e:
        p.error(str(e))
    paths = [plot_layer_curves({run_dir.name: diag}, out_dir, f"diagnostics_layers_{run_dir.name}"),
             plot_head_heatmap(diag, out_dir, f"diagnostics_heads_{run_dir.name}")]
    print("\n".join(f"wrote {q}" for q in paths))


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m xsa.diagnostics", description=(
        "Per-layer, per-head attention diagnostics of a trained run on a fixed validation batch: "
        "cos(y_i, v_i) before and after the XSA projection, diagonal attention mass, attention "
        "entropy and cos(v_i, v_j). Writes JSON (default RUN_DIR/diagnostics.json)."))
    p.add_argument("--run", required=True, help="run folder written by python -m xsa.train")
    p.add_argument("--out", default=None, help="output JSON (default RUN_DIR/diagnostics.json)")
    p.add_argument("--batch-size", type=int, default=8, help="validation sequences per batch (default 8)")
    p.add_argument("--batches", type=int, default=2, help="validation batches, averaged (default 2: 16 rows)")
    p.add_argument("--device", default=None, help="cpu, cuda, ... (default: autodetect)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    p.add_argument("--figures", default=None, metavar="DIR", help=(
        "only draw the run's figures (PNG + SVG) into DIR from its diagnostics.json; no checkpoint needed"))
    args = p.parse_args(argv)
    run_dir = Path(args.run)
    if not run_dir.is_dir():
        p.error(f"--run: {run_dir} is not a directory")
    if args.figures is not None:
        return draw_from_record(p, run_dir, Path(args.figures))
    if args.batch_size < 1:
        p.error(f"--batch-size must be positive, got {args.batch_size}")
    if args.batches < 1:
        p.error(f"--batches must be positive, got {args.batches}")
    try:  # a folder or an unwritable place first: --overwrite never replaces a folder
        out = check_out(Path(args.out) if args.out else run_dir / "diagnostics.json", "diagnostics")
    except ValueError as e:
        p.error(f"--{e}")
    if out.exists() and not args.overwrite:
        p.error(f"--out: {out} exists (pass --overwrite to replace it)")
    try:
        result = write_diagnostics(run_dir, out, batch_size=args.batch_size, batches=args.batches, device=args.device)
    except (ValueError, OSError, RuntimeError) as e:  # RunFolderBusy is a RuntimeError
        p.error(str(e))
    for layer in result["layers"]:
        print(f"layer {layer['layer']:2d} alpha={layer['xsa_alpha']:.2f} "
              + " ".join(f"{m}={layer[m]:+.4f}" for m in METRICS))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
