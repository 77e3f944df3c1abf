"""BERT-tiny masked-LM pretraining through Model Garden: LAMB vs VR-LAMB.

Input: ``bert_mlm.py``'s JSON (``studies/sweeps/results/bert_mlm.json``)."""

import os

import numpy as np

from report.sweeps.common import pm, pyplot, verdict


def render(ctx, lines):
    bert = ctx.result("bert_mlm")
    if not (bert and bert.get("runs")):
        return
    img_rel, img_dir, headline = ctx.img_rel, ctx.img_dir, ctx.bert_headline
    cfg = bert["config"]
    lines += [
        "## BERT-tiny masked LM through Model Garden (LAMB vs VR-LAMB)",
        "",
        f"`{bert['command']}`: {cfg['model']}; `tpu_scripts/train.py` on "
        f"{cfg['replicas']} logical CPU replicas, global batch {cfg['global_batch']}, "
        f"{cfg['steps']} steps, peak LR {cfg['peak_lr']} ({cfg['lr_rule']}), the YAML's "
        "warm-up (10% of the steps) and polynomial decay; seed = initial weights and data "
        "order, shared by the pair. Held-out Shakespeare plays "
        f"({bert.get('data', {}).get('num_eval_examples', '?')} sequences), train set "
        f"{bert.get('data', {}).get('num_train_examples', '?')} sequences.",
        "",
        "| optimizer | seeds | MLM accuracy % | MLM loss | NSP accuracy % | wall s/run |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    by = {}
    for r in bert["runs"]:
        by.setdefault(r["optimizer"], {})[r["seed"]] = r
    for opt, label in (("lamb", "LAMB"), ("vrgd_lamb", "VR-LAMB")):
        rs = list(by.get(opt, {}).values())
        if not rs:
            continue
        loss = np.asarray([r["final"]["mlm_loss"] for r in rs])
        lines.append(
            f"| {label} | {len(rs)} | {pm([r['final']['mlm_accuracy'] for r in rs])} | "
            f"{loss.mean():.3f} ± {loss.std(ddof=1) if loss.size > 1 else 0:.3f} | "
            f"{pm([r['final']['nsp_accuracy'] for r in rs])} | "
            f"{np.mean([r['wall_s'] for r in rs]):.0f} |"
        )
    seeds = sorted(set(by.get("lamb", {})) & set(by.get("vrgd_lamb", {})))
    if seeds:
        d_acc = [
            by["vrgd_lamb"][s]["final"]["mlm_accuracy"] - by["lamb"][s]["final"]["mlm_accuracy"]
            for s in seeds
        ]
        d_loss = [
            by["vrgd_lamb"][s]["final"]["mlm_loss"] - by["lamb"][s]["final"]["mlm_loss"]
            for s in seeds
        ]
        lines += [
            "",
            f"Paired by seed (VR − base): MLM accuracy {pm(d_acc)} pp "
            f"({verdict(d_acc)}); MLM loss {np.mean(d_loss):+.4f} "
            f"({verdict(d_loss, higher_is_better=False)}).",
            "",
        ]
        headline.append(
            f"- BERT-tiny MLM (Model Garden), batch {cfg['global_batch']}, "
            f"{cfg['steps']} steps: VR-LAMB − LAMB MLM accuracy {pm(d_acc)} pp "
            f"({verdict(d_acc)}), MLM loss {np.mean(d_loss):+.4f} "
            f"({verdict(d_loss, higher_is_better=False)}), {len(seeds)} seeds."
        )
    name = "bert_mlm.png"
    plot_bert(bert, os.path.join(img_dir, name))
    lines += [f"![BERT-tiny MLM]({img_rel}/{name})", ""]


def plot_bert(bert, path):
    """Training loss (mean over seeds) of LAMB and VR-LAMB, and VR-LAMB's GSNR diagnostics."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    for opt, color in (("lamb", "tab:blue"), ("vrgd_lamb", "tab:red")):
        runs = [r for r in bert["runs"] if r["optimizer"] == opt]
        if not runs:
            continue
        steps = sorted(set.intersection(*[set(int(k) for k in r["train_loss"]) for r in runs]))
        loss = [np.mean([r["train_loss"][str(s)] for r in runs]) for s in steps]
        label = "VR-LAMB" if opt == "vrgd_lamb" else "LAMB"
        axes[0].plot(steps, loss, marker=".", color=color, label=f"{label} ({len(runs)} seeds)")
        if opt == "vrgd_lamb":
            for r in runs:
                g = r["gsnr"]
                if not g:
                    continue
                st = sorted(int(k) for k in g["mean_gsnr"])
                axes[1].plot(
                    st, [g["mean_gsnr"][str(k)] for k in st], marker=".", label=f"seed {r['seed']}"
                )
                axes[2].plot(
                    st,
                    [100 * g["frac_at_gamma"][str(k)] for k in st],
                    marker=".",
                    label=f"seed {r['seed']}",
                )
    axes[0].set_ylabel("training loss (MLM + NSP)")
    axes[1].set_ylabel("mean GSNR (mean over variables)")
    axes[1].set_yscale("log")
    axes[2].set_ylabel("% elements at gamma (mean over variables)")
    for ax in axes:
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    cfg = bert["config"]
    fig.suptitle(
        f"BERT-tiny MLM on Shakespeare, global batch {cfg['global_batch']}, "
        f"{cfg['replicas']} replicas, {cfg['steps']} steps"
    )
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
