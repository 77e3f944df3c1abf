r"""Renders docs/results.md and docs/images/*.png from the benchmark JSON files.

Every number in the output is computed here from the JSON written by ``sweep.py``,
``overhead.py``, ``bert_mlm.py`` and ``groups.py``; nothing is typed by hand. Statements like
"better" / "worse" are decided by a fixed rule (paired difference over seeds beyond two
standard errors), stated in the output.

Examples:
  python benchmarks/render.py --quick        # renders the *_quick.json results
  python benchmarks/render.py                # renders sweep.json and overhead.json
"""

import math
import os
import sys

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import render_evidence  # noqa: E402  (benchmarks/ is sys.path[0] when run as a script)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, "benchmarks", "results")

FLAGS = flags.FLAGS
flags.DEFINE_bool("quick", False, "Render the --quick results (sweep_quick.json, ...).")
flags.DEFINE_string("sweep", None, "Sweep JSON (default from --quick).")
flags.DEFINE_string("overhead", None, "Overhead JSON (default from --quick).")
flags.DEFINE_string("bert", None, "BERT MLM JSON (default from --quick).")
flags.DEFINE_string("groups", None, "Micro-batch groups cost JSON (default from --quick).")
flags.DEFINE_list(
    "lr_probes",
    ["lr_probe.json", "lr_probe_8192.json", "lr_probe_lars.json", "lr_probe_lars_digits.json"],
    "Learning-rate probe JSONs under benchmarks/results (those that exist); for "
    "the same data set, pair and batch a later file supersedes an earlier one.",
)
flags.DEFINE_string(
    "out_md",
    None,
    "Markdown output; default docs/results.md "
    "(docs/results_quick.md with --quick, so a smoke test never overwrites "
    "the full report).",
)
flags.DEFINE_string(
    "images_dir", None, "PNG output dir; default docs/images (docs/images/quick with --quick)."
)
flags.DEFINE_string(
    "readme",
    None,
    "Also rewrite the results block of this README (between "
    "the markers); default README.md for full results, none with --quick.",
)

README_BEGIN = "<!-- results:begin -->"
README_END = "<!-- results:end -->"

PAIR_LABEL = {"momentum": "Momentum", "adam": "Adam", "lamb": "LAMB", "lars": "LARS"}
VR_LABEL = {"momentum": "VR-Momentum", "adam": "VR-Adam", "lamb": "VR-LAMB", "lars": "VR-LARS"}
VARIANT_LABEL = {
    "base": "base X",
    "base_allreduce": "X summed by ReplicaContext.all_reduce (tf_keras only)",
    "sq": "X + all-reduce of squares (a)",
    "vr_nostats": "VR-X, statistics_interval=0 (no diagnostics)",
    "vr": "VR-X, diagnostics every step (statistics_interval=1, the default)",
}


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _load(path):
    import json

    if path and os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    return None


def pct(x, digits=2):
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.{digits}f}"


def pm(values, digits=2):
    """'mean ± std' in percent."""
    if not values:
        return "—"
    v = np.asarray(values, np.float64)
    sd = v.std(ddof=1) if v.size > 1 else 0.0
    return f"{100 * v.mean():.{digits}f} ± {100 * sd:.{digits}f}"


def verdict(diffs, higher_is_better=True):
    """Paired differences -> 'better' / 'worse' / 'n.s.' / 'n/a'.

    Two-sided paired t-test at 5%: |mean| > t(0.975, n-1) * std / sqrt(n); needs n >= 3
    (with n = 2 a single lucky seed decides). Zero spread with a non-zero mean counts as a
    difference.
    """
    from scipy import stats

    d = np.asarray(diffs, np.float64)
    if d.size < 3:
        return f"n/a ({d.size} seeds)"
    se = d.std(ddof=1) / math.sqrt(d.size)
    m = d.mean()
    if m == 0 or abs(m) <= stats.t.ppf(0.975, d.size - 1) * se:
        return "n.s."
    good = m > 0 if higher_is_better else m < 0
    return "**better**" if good else "**worse**"


def main_runs(sweep):
    return [r for r in sweep["runs"] if r["key"][0] == "main"]


def select(runs, **kw):
    out = []
    for r in runs:
        if all(r.get(k) == v for k, v in kw.items()):
            out.append(r)
    return sorted(out, key=lambda r: r["seed"])


def paired(base, vr):
    """Runs of the same seeds on both sides."""
    b = {r["seed"]: r for r in base}
    v = {r["seed"]: r for r in vr}
    seeds = sorted(set(b) & set(v))
    return [b[s] for s in seeds], [v[s] for s in seeds]


def mean_curve(runs):
    """(steps, mean test acc) over seeds; curves share their eval steps."""
    if not runs:
        return [], []
    n = min(len(r["curve"]) for r in runs)
    steps = [runs[0]["curve"][i]["step"] for i in range(n)]
    acc = [float(np.mean([r["curve"][i]["test_acc"] for r in runs])) for i in range(n)]
    return steps, acc


def first_reach(steps, acc, target):
    for s, a in zip(steps, acc):
        if a >= target - 1e-12:
            return s
    return None


def n_div(runs):
    return sum(1 for r in runs if r["final"]["diverged"] or r["final"]["train_acc"] < 0.15)


# --------------------------------------------------------------------------------------------
# Plots
# --------------------------------------------------------------------------------------------


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 10, "figure.dpi": 110})
    return plt


def plot_acc_vs_batch(sweep, ds, path):
    plt = _plt()
    cfg = sweep["config"]
    runs = main_runs(sweep)
    batches = cfg["batches"] if ds == "mnist1d" else cfg["digits_batches"]
    pairs = cfg["pairs"]
    fig, axes = plt.subplots(2, len(pairs), figsize=(3.4 * len(pairs), 6.2), squeeze=False)
    for j, pair in enumerate(pairs):
        for side, color, label in (
            ("base", "tab:blue", PAIR_LABEL[pair]),
            ("vr", "tab:red", VR_LABEL[pair]),
        ):
            for row, metric in ((0, "test_acc"), (1, "gap")):
                xs, ms, ss = [], [], []
                for b in batches:
                    kw = dict(dataset=ds, pair=pair, side=side, batch=b, replicas=cfg["replicas"])
                    if side == "vr":
                        kw["gamma"] = 0.1
                    rs = select(runs, **kw)
                    if not rs:
                        continue
                    v = [r["final"][metric] for r in rs]
                    xs.append(b)
                    ms.append(100 * np.mean(v))
                    ss.append(100 * (np.std(v, ddof=1) if len(v) > 1 else 0))
                if xs:
                    axes[row][j].errorbar(
                        xs, ms, yerr=ss, marker="o", capsize=3, color=color, label=label
                    )
        for row, ylabel in ((0, "test accuracy (%)"), (1, "train − test accuracy (pp)")):
            ax = axes[row][j]
            ax.set_xscale("log", base=2)
            ax.set_xticks(batches)
            ax.set_xticklabels([str(b) for b in batches])
            ax.grid(alpha=0.3)
            if j == 0:
                ax.set_ylabel(ylabel)
            if row == 1:
                ax.set_xlabel("global batch")
        axes[0][j].set_title(PAIR_LABEL[pair])
        axes[0][j].legend(fontsize=8, loc="lower left")
    fig.suptitle(
        f"{ds}: final test accuracy and generalization gap vs batch "
        f"(mean ± std over seeds, {cfg['replicas']} replicas, fixed epochs)"
    )
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_curves(sweep, ds, batch, path):
    plt = _plt()
    cfg = sweep["config"]
    runs = main_runs(sweep)
    pairs = cfg["pairs"]
    fig, axes = plt.subplots(1, len(pairs), figsize=(3.4 * len(pairs), 3.3), squeeze=False)
    for j, pair in enumerate(pairs):
        ax = axes[0][j]
        for side, color, label in (
            ("base", "tab:blue", PAIR_LABEL[pair]),
            ("vr", "tab:red", VR_LABEL[pair]),
        ):
            kw = dict(dataset=ds, pair=pair, side=side, batch=batch, replicas=cfg["replicas"])
            if side == "vr":
                kw["gamma"] = 0.1
            rs = select(runs, **kw)
            for r in rs:
                ax.plot(
                    [c["step"] for c in r["curve"]],
                    [100 * c["test_acc"] for c in r["curve"]],
                    color=color,
                    alpha=0.25,
                    lw=0.8,
                )
            s, a = mean_curve(rs)
            if s:
                ax.plot(s, [100 * x for x in a], color=color, lw=2, label=label)
        ax.set_title(f"{PAIR_LABEL[pair]}, batch {batch}")
        ax.set_xlabel("step")
        if j == 0:
            ax.set_ylabel("test accuracy (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_gsnr(sweep, ds, batches, pairs, path):
    """Mean GSNR and fraction clipped at gamma per variable over training (seed 0)."""
    plt = _plt()
    cfg = sweep["config"]
    runs = main_runs(sweep)
    cols = [(p, b) for p in pairs for b in batches]
    fig, axes = plt.subplots(2, len(cols), figsize=(3.4 * len(cols), 6.0), squeeze=False)
    for j, (pair, batch) in enumerate(cols):
        rs = select(
            runs, dataset=ds, pair=pair, side="vr", batch=batch, replicas=cfg["replicas"], gamma=0.1
        )
        if not rs or not rs[0]["gsnr"]:
            continue
        r = rs[0]
        names = list(r["gsnr"][0]["stats"])
        steps = [g["step"] for g in r["gsnr"]]
        for name in names:
            style = "-" if name.endswith("kernel") else ":"
            short = name.replace("cnn1d/", "")
            axes[0][j].plot(
                steps, [g["stats"][name][0] for g in r["gsnr"]], style, marker=".", label=short
            )
            axes[1][j].plot(
                steps,
                [100 * g["stats"][name][1] for g in r["gsnr"]],
                style,
                marker=".",
                label=short,
            )
        axes[0][j].set_yscale("log")
        axes[0][j].set_title(f"{VR_LABEL[pair]}, batch {batch} (seed {r['seed']})")
        axes[1][j].set_xlabel("step")
        for row in (0, 1):
            axes[row][j].grid(alpha=0.3)
        if j == 0:
            axes[0][j].set_ylabel("mean GSNR of the variable")
            axes[1][j].set_ylabel("% elements clipped at gamma")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(
        f"{ds}: GSNR statistics at the last step of each epoch (solid: kernels, dotted: biases)"
    )
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_bert(bert, path):
    """Training loss (mean over seeds) of LAMB and VR-LAMB, and VR-LAMB's GSNR diagnostics."""
    plt = _plt()
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


def bert_section(bert, img_rel, img_dir, lines, headline):
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


def plot_ablation(rows, xlabel, title, path, xlog=False):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 3.4))
    xs = [r["x"] for r in rows]
    for key, color, label in (("base", "tab:blue", "base"), ("vr", "tab:red", "VR")):
        pts = [(r["x"], r[key]) for r in rows if r.get(key)]
        if not pts:
            continue
        m = [100 * np.mean(v) for _, v in pts]
        s = [100 * (np.std(v, ddof=1) if len(v) > 1 else 0) for _, v in pts]
        ax.errorbar([x for x, _ in pts], m, yerr=s, marker="o", capsize=3, color=color, label=label)
    if xlog:
        ax.set_xscale("log", base=2)
        ax.minorticks_off()
    ax.set_xticks(xs)
    ax.set_xticklabels([str(x) for x in xs])
    ax.set_xlabel(xlabel)
    ax.set_ylabel("final test accuracy (%)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_overhead(ov, path):
    plt = _plt()
    entries = ov["timing"]
    variants = []
    for e in entries:
        variants += [v for v in e["ratio"] if v != "base" and v not in variants]
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(entries) + 2), 3.8))
    width = 0.8 / max(1, len(variants))
    colors = {
        "base_allreduce": "tab:cyan",
        "sq": "tab:gray",
        "vr_nostats": "tab:orange",
        "vr": "tab:red",
    }
    for i, v in enumerate(variants):
        xs, meds, lo, hi = [], [], [], []
        for j, e in enumerate(entries):
            if v not in e["ratio"]:
                continue
            r = e["ratio"][v]
            xs.append(j + (i - (len(variants) - 1) / 2) * width)
            meds.append(r["median"])
            lo.append(r["median"] - r["min"])
            hi.append(r["max"] - r["median"])
        ax.bar(
            xs,
            meds,
            width,
            yerr=[lo, hi],
            capsize=2,
            color=colors.get(v),
            label=VARIANT_LABEL.get(v, v),
        )
    ax.axhline(1.0, color="k", lw=0.8)
    ax.axhline(1.05, color="k", lw=0.6, ls="--")
    top = max([e["ratio"][v]["max"] for e in entries for v in e["ratio"]] + [1.1])
    ax.set_yscale("log")
    ticks = [t for t in (0.8, 1.0, 1.05, 1.25, 1.5, 2, 3, 4, 8, 16, 32) if t <= top * 1.2]
    ax.set_yticks(ticks)
    ax.set_yticklabels([f"{t:g}" for t in ticks])
    ax.minorticks_off()
    ax.set_ylim(
        min(0.8, min(e["ratio"][v]["min"] for e in entries for v in e["ratio"]) * 0.95), top * 1.3
    )
    ax.set_xticks(range(len(entries)))
    ax.set_xticklabels(
        [f"{e['model']}\n{PAIR_LABEL.get(e['pair'], e['pair'])} B={e['batch']}" for e in entries],
        fontsize=8,
    )
    ax.set_ylabel("step time / base step time (log)")
    ax.set_title(
        f"Step-time ratios at {entries[0]['replicas'] if entries else '?'} replicas "
        "(bar: median, whiskers: min–max over interleaved reps)",
        fontsize=9,
    )
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# --------------------------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------------------------


def sweep_sections(sweep, img_rel, img_dir, lines, headline):
    cfg = sweep["config"]
    runs = main_runs(sweep)
    status = (
        "complete"
        if sweep.get("complete")
        else f"**partial** ({len(runs)} runs; the sweep was still running or stopped)"
    )
    lines += (
        [
            "## Batch-size sweep",
            "",
            f"Command: `{sweep['command']}`  ",
            f"Status: {status}; wall time {sweep.get('elapsed_s', 0) / 60:.1f} min"
            f" (started {sweep.get('started')}).",
            "",
        ]
        + [
            f"Resumed from an earlier invocation: `{h.get('command')}` (started {h.get('started')},"
            f" seeds {h.get('seeds')}, {h.get('runs_at_stop')} runs kept; runs are keyed by their "
            "own settings, so kept runs are identical to what this command would produce)."
            for h in sweep.get("history", [])
        ]
        + [
            "",
            "Setup (from the results file): "
            + "; ".join(
                [
                    f"model {cfg['model']}",
                    f"{cfg['replicas']} logical CPU replicas, MirroredStrategy + ReductionToOneDevice",
                    f"seeds 0..{cfg['seeds'] - 1} (seed = initial weights and data order, shared by "
                    "base and VR)",
                    f"learning rate: {cfg['lr_rule']}-scaled from the base batch, {cfg['schedule']}, "
                    f"warm-up fraction {cfg['warmup_frac']}",
                    "VR: gamma 0.1, beta_3 = library default (0 for Momentum/LARS, 0.9 for Adam/LAMB)",
                ]
            )
            + ".",
            "",
        ]
    )
    ds_info = sweep.get("datasets", {})
    for ds in cfg["datasets"]:
        info = ds_info.get(ds, {})
        batches = cfg["batches"] if ds == "mnist1d" else cfg["digits_batches"]
        base_b = cfg["base_batch"] if ds == "mnist1d" else cfg["digits_base_batch"]
        epochs = cfg["epochs"] if ds == "mnist1d" else cfg["digits_epochs"]
        lrs = cfg["base_lr"][ds] if isinstance(cfg["base_lr"].get(ds), dict) else cfg["base_lr"]
        lines += [
            f"### {ds}",
            "",
            f"{info.get('num_train', '?')} train / {info.get('num_test', '?')} test "
            f"({info.get('source') or info.get('generator')}); {epochs} epochs at every "
            f"batch; base learning rates at batch {base_b}: "
            + ", ".join(f"{PAIR_LABEL[p]} {lrs[p]:g}" for p in cfg["pairs"] if p in lrs)
            + ".",
            "",
        ]
        lines += [
            "Final test accuracy (%), generalization gap = train − test accuracy (pp), "
            "mean ± std over seeds; Δ = VR − base, paired by seed (mean ± std). 'div' = runs that diverged (train acc < 15% "
            "or non-finite loss). Verdict: two-sided paired t-test at 5% on the per-seed Δ "
            "(n/a below 3 seeds).",
            "",
            "| pair | batch | steps | base test | VR test | Δ test | verdict | base gap | "
            "VR gap | Δ gap | div (base/VR) |",
            "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|",
        ]
        for pair in cfg["pairs"]:
            for b in batches:
                base = select(
                    runs, dataset=ds, pair=pair, side="base", batch=b, replicas=cfg["replicas"]
                )
                vr = select(
                    runs,
                    dataset=ds,
                    pair=pair,
                    side="vr",
                    batch=b,
                    replicas=cfg["replicas"],
                    gamma=0.1,
                )
                if not base and not vr:
                    continue
                pb, pv = paired(base, vr)
                dt = [v["final"]["test_acc"] - u["final"]["test_acc"] for u, v in zip(pb, pv)]
                dg = [v["final"]["gap"] - u["final"]["gap"] for u, v in zip(pb, pv)]
                steps = (base or vr)[0]["steps"]
                lines.append(
                    f"| {PAIR_LABEL[pair]} | {b} | {steps} | "
                    f"{pm([r['final']['test_acc'] for r in base])} | "
                    f"{pm([r['final']['test_acc'] for r in vr])} | {pm(dt)} | "
                    f"{verdict(dt) if dt else '—'} | "
                    f"{pm([r['final']['gap'] for r in base])} | "
                    f"{pm([r['final']['gap'] for r in vr])} | {pm(dg)} | "
                    f"{n_div(base)}/{n_div(vr)} |"
                )
                if b == max(batches) and dt:
                    headline.append(
                        (
                            ds,
                            pair,
                            b,
                            dt,
                            dg,
                            len(dt),
                            [u["final"]["test_acc"] for u in pb],
                            [v["final"]["test_acc"] for v in pv],
                        )
                    )
        lines.append("")
        name = f"acc_vs_batch_{ds}.png"
        plot_acc_vs_batch(sweep, ds, os.path.join(img_dir, name))
        lines += [f"![test accuracy and gap vs batch, {ds}]({img_rel}/{name})", ""]

        # Steps to target.
        lines += [
            "Steps to reach the base optimizer's best test accuracy (target = maximum of the "
            "base's seed-mean test-accuracy curve, evaluated "
            f"{cfg['evals_per_epoch']}x per epoch; '—' = VR's seed-mean curve never reached "
            "it):",
            "",
            "| pair | batch | target (%) | base steps | VR steps | VR/base | VR best (%) |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for pair in cfg["pairs"]:
            for b in batches:
                base = select(
                    runs, dataset=ds, pair=pair, side="base", batch=b, replicas=cfg["replicas"]
                )
                vr = select(
                    runs,
                    dataset=ds,
                    pair=pair,
                    side="vr",
                    batch=b,
                    replicas=cfg["replicas"],
                    gamma=0.1,
                )
                pb, pv = paired(base, vr)
                if not pb:
                    continue
                sb, ab = mean_curve(pb)
                sv, av = mean_curve(pv)
                target = max(ab)
                nb, nv = first_reach(sb, ab, target), first_reach(sv, av, target)
                ratio = f"{nv / nb:.2f}" if nv and nb else "—"
                lines.append(
                    f"| {PAIR_LABEL[pair]} | {b} | {pct(target)} | {nb} | "
                    f"{nv if nv else '—'} | {ratio} | {pct(max(av))} |"
                )
        lines.append("")
        big = max(batches)
        name = f"curves_{ds}_b{big}.png"
        plot_curves(sweep, ds, big, os.path.join(img_dir, name))
        lines += [
            f"Test-accuracy curves at batch {big} (thin: seeds, thick: mean):",
            "",
            f"![curves {ds} batch {big}]({img_rel}/{name})",
            "",
        ]

    # GSNR statistics.
    ds0 = cfg["datasets"][0]
    b0 = cfg["batches"] if ds0 == "mnist1d" else cfg["digits_batches"]
    lines += [
        "### GSNR statistics during training",
        "",
        "Read with `opt.vrgd_statistics()` after every epoch (the values of that "
        "epoch's last step): per variable, the mean GSNR `r` and the fraction of "
        "elements whose factor is clipped at gamma. Median over the variables, seed-"
        "mean, first and last epoch:",
        "",
        "| pair | batch | mean GSNR, epoch 1 | mean GSNR, last | % at gamma, epoch 1 | "
        "% at gamma, last | % at 1, last |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for pair in cfg["pairs"]:
        for b in b0:
            vr = select(
                runs,
                dataset=ds0,
                pair=pair,
                side="vr",
                batch=b,
                replicas=cfg["replicas"],
                gamma=0.1,
            )
            vr = [r for r in vr if r["gsnr"]]
            if not vr:
                continue

            def med(r, idx, field):
                return float(np.median([v[field] for v in r["gsnr"][idx]["stats"].values()]))

            cells = []
            for idx, field, scale in (
                (0, 0, 1),
                (-1, 0, 1),
                (0, 1, 100),
                (-1, 1, 100),
                (-1, 2, 100),
            ):
                cells.append(f"{scale * np.mean([med(r, idx, field) for r in vr]):.3g}")
            lines.append(f"| {VR_LABEL[pair]} | {b} | " + " | ".join(cells) + " |")
    lines.append("")
    name = "gsnr_evolution.png"
    gp = [p for p in (cfg.get("ablation_pair"), "momentum") if p in cfg["pairs"]]
    gp = list(dict.fromkeys(gp))[:2]
    plot_gsnr(sweep, ds0, [min(b0), max(b0)], gp, os.path.join(img_dir, name))
    lines += [f"![GSNR evolution]({img_rel}/{name})", ""]

    # Ablations: only the ablation seeds, so that every row has the same seeds.
    ab_seeds = set(range(cfg.get("ablation_seeds") or cfg["seeds"]))
    all_runs = [r for r in main_runs(sweep) if r["seed"] in ab_seeds]
    ab_ds, ab_pair, ab_b = cfg["ablation_dataset"], cfg["ablation_pair"], cfg["ablation_batch"]
    if "k" in cfg["experiments"]:
        rows = []
        lines += [
            f"### k ablation ({PAIR_LABEL[ab_pair]}, {ab_ds}, batch {ab_b}, seeds "
            f"{sorted(ab_seeds)})",
            "",
            "Replicas k change how many shards the GSNR is estimated from (and the "
            "per-replica batch); the base optimizer's maths does not depend on k.",
            "",
            "| k | per-replica batch | base test | VR test | Δ test | verdict | VR gap | "
            "VR % at gamma (last epoch) |",
            "|---:|---:|---:|---:|---:|---|---:|---:|",
        ]
        for k in cfg["k_values"]:
            base = select(
                all_runs, dataset=ab_ds, pair=ab_pair, side="base", batch=ab_b, replicas=k
            )
            vr = select(
                all_runs, dataset=ab_ds, pair=ab_pair, side="vr", batch=ab_b, replicas=k, gamma=0.1
            )
            if not base and not vr:
                continue
            pb, pv = paired(base, vr)
            dt = [v["final"]["test_acc"] - u["final"]["test_acc"] for u, v in zip(pb, pv)]
            fg = [
                float(np.median([s[1] for s in r["gsnr"][-1]["stats"].values()]))
                for r in vr
                if r["gsnr"]
            ]
            lines.append(
                f"| {k} | {ab_b // k} | {pm([r['final']['test_acc'] for r in base])}"
                f" | {pm([r['final']['test_acc'] for r in vr])} | {pm(dt)} | "
                f"{verdict(dt) if dt else '—'} | "
                f"{pm([r['final']['gap'] for r in vr])} | "
                f"{pct(np.mean(fg) if fg else None, 1)} |"
            )
            rows.append(
                {
                    "x": k,
                    "base": [r["final"]["test_acc"] for r in base],
                    "vr": [r["final"]["test_acc"] for r in vr],
                }
            )
        lines.append("")
        if rows:
            plot_ablation(
                rows,
                "replicas k",
                f"k ablation: {PAIR_LABEL[ab_pair]} vs {VR_LABEL[ab_pair]}, {ab_ds}, batch {ab_b}",
                os.path.join(img_dir, "ablation_k.png"),
                xlog=True,
            )
            lines += [f"![k ablation]({img_rel}/ablation_k.png)", ""]
    if "gamma" in cfg["experiments"]:
        rows = []
        base = select(
            all_runs, dataset=ab_ds, pair=ab_pair, side="base", batch=ab_b, replicas=cfg["replicas"]
        )
        lines += [
            f"### gamma ablation ({VR_LABEL[ab_pair]}, {ab_ds}, batch {ab_b}, "
            f"{cfg['replicas']} replicas, seeds {sorted(ab_seeds)})",
            "",
            f"Base {PAIR_LABEL[ab_pair]}: test {pm([r['final']['test_acc'] for r in base])}"
            f", gap {pm([r['final']['gap'] for r in base])}. gamma = 1 must reproduce "
            "the base optimizer exactly (factor identically 1).",
            "",
            "| gamma | VR test | Δ test vs base | verdict | VR gap | % at gamma | "
            "% at 1 | max abs Δ test vs base |",
            "|---:|---:|---:|---|---:|---:|---:|---:|",
        ]
        for g in cfg["gammas"]:
            vr = select(
                all_runs,
                dataset=ab_ds,
                pair=ab_pair,
                side="vr",
                batch=ab_b,
                replicas=cfg["replicas"],
                gamma=g,
            )
            if not vr:
                continue
            pb, pv = paired(base, vr)
            dt = [v["final"]["test_acc"] - u["final"]["test_acc"] for u, v in zip(pb, pv)]
            fg = [
                float(np.median([s[1] for s in r["gsnr"][-1]["stats"].values()]))
                for r in vr
                if r["gsnr"]
            ]
            f1 = [
                float(np.median([s[2] for s in r["gsnr"][-1]["stats"].values()]))
                for r in vr
                if r["gsnr"]
            ]
            lines.append(
                f"| {g:g} | {pm([r['final']['test_acc'] for r in vr])} | {pm(dt)} | "
                f"{verdict(dt) if dt else '—'} | "
                f"{pm([r['final']['gap'] for r in vr])} | "
                f"{pct(np.mean(fg) if fg else None, 1)} | "
                f"{pct(np.mean(f1) if f1 else None, 1)} | "
                f"{pct(max(abs(x) for x in dt) if dt else None, 3)} |"
            )
            rows.append(
                {
                    "x": g,
                    "vr": [r["final"]["test_acc"] for r in vr],
                    "base": [r["final"]["test_acc"] for r in base],
                }
            )
        lines.append("")
        if rows:
            plot_ablation(
                rows,
                "gamma (log scale)",
                f"gamma: {VR_LABEL[ab_pair]} (base = {PAIR_LABEL[ab_pair]}), {ab_ds}, batch {ab_b}",
                os.path.join(img_dir, "ablation_gamma.png"),
                xlog=True,
            )
            lines += [f"![gamma ablation]({img_rel}/ablation_gamma.png)", ""]


def lr_probe_section(probes, lines):
    rows = []
    latest = {}
    for name, doc in probes:
        for r in doc["runs"]:
            latest[(r["dataset"], r["pair"], r["batch"])] = name
    superseded = 0
    for name, doc in probes:
        for r in doc["runs"]:
            if latest[(r["dataset"], r["pair"], r["batch"])] != name:
                superseded += 1
                continue
            rows.append(
                (
                    r["dataset"],
                    r["pair"],
                    r["batch"],
                    r["peak_lr"],
                    r["final"]["test_acc"],
                    r["final"]["diverged"] or r["final"]["train_acc"] < 0.15,
                    name,
                )
            )
    if not rows:
        return
    lines += [
        "## Learning-rate probe (base optimizers only, seed 0)",
        "",
        "How the base learning rates were chosen: the base optimizer alone, one seed, "
        "at the base batch (and at the largest batch with the square-root-scaled rate), "
        "from these files. VR was not tuned; it uses the base's rate.",
        "",
        "| data | pair | batch | peak lr | test acc (%) | diverged | file |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for ds, pair, b, lr, acc, div, name in sorted(rows, key=lambda t: t[:4]):
        lines.append(
            f"| {ds} | {PAIR_LABEL[pair]} | {b} | {lr:.4g} | {pct(acc)} | "
            f"{'yes' if div else ''} | {name} |"
        )
    lines += [
        "",
        f"{superseded} rows of earlier files superseded by a later probe of the "
        "same data set, pair and batch (e.g. after a change of the LARS exclusions) "
        "are not shown.",
        "",
        "Commands (base learning rates in effect, from each file):",
        "",
    ]
    for name, doc in probes:
        lines.append(f"- `{doc['command']}` — base lr {doc['config']['base_lr']}")
    lines.append("")


def overhead_section(ov, img_rel, img_dir, lines, headline_ov):
    lines += [
        "## Overhead of VR-X over X",
        "",
        f"Command: `{ov['command']}`  ",
        f"Status: {'complete' if ov.get('complete') else '**partial**'}; wall time "
        f"{ov.get('elapsed_s', 0) / 60:.1f} min.",
        "",
        "Step time of compiled train steps (`tf.function` around `strategy.run`, fixed "
        "batch, steps looped inside the function, tracing and one warm-up call "
        "excluded). Variants are built side by side in one process and timed in "
        "rotating order in every repetition; ratios are variant/base within a "
        "repetition ('min/min': fastest repetition of the variant over the fastest of "
        "base, less sensitive to load spikes). 'graph ops' counts the nodes of the traced step (all replicas "
        "unrolled), a proxy for fixed per-step cost on CPU.",
        "",
        "Variants: " + "; ".join(f"`{k}` = {v}" for k, v in VARIANT_LABEL.items()) + ".",
        "",
    ]
    for e in ov["timing"]:
        lines += [
            f"### {e['model']}, {PAIR_LABEL.get(e['pair'], e['pair'])}, batch "
            f"{e['batch']} ({e['per_replica_batch']}/replica), {e['replicas']} replicas"
            f", {e['params']:,} parameters in {e['trainable_variables']} variables",
            "",
            f"{e['reps']} repetitions of {e['steps_per_call']} steps. Family: "
            f"{e['family']}." + (f" Data: {e['data']}." if e.get("data") else ""),
            "",
            "| variant | step ms (median) | ratio min | ratio median | ratio max | "
            "min/min | graph ops | optimizer state MB (all replicas) | "
            "weights vs reference |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for v, r in e["ratio"].items():
            wc = e.get("weights_check", {}).get(v)
            wtxt = f"{wc['max_abs_diff_rel']:.1e} vs {wc['vs']}" if wc else ""
            sb = (e.get("state_bytes") or {}).get(v)
            stxt = f"{sb['optimizer_state_bytes'] / 2**20:.2f}" if sb else "—"
            rm = e.get("ratio_of_min", {}).get(v)
            mm = f"{rm:.3f}" if rm is not None else "—"
            lines.append(
                f"| {VARIANT_LABEL.get(v, v)} | {e['step_ms'][v]['median']:.1f} | "
                f"{r['min']:.3f} | {r['median']:.3f} | {r['max']:.3f} | "
                f"{mm} | {e['graph_ops'].get(v) or '—'} | {stxt} | {wtxt} |"
            )
        sb = e.get("state_bytes") or {}
        if sb.get("base") and sb.get("vr"):
            lines += [
                "",
                f"Model weights {sb['base']['model_bytes'] / 2**20:.2f} MB over all "
                f"{e['replicas']} replica copies; VR adds "
                f"{(sb['vr']['optimizer_state_bytes'] - sb['base']['optimizer_state_bytes']) / 2**20:.2f}"
                " MB of optimizer state (exact, all replicas), i.e. "
                f"{(sb['vr']['optimizer_state_bytes'] - sb['base']['optimizer_state_bytes']) / sb['base']['model_bytes']:.2f}"
                "x the weights.",
            ]
        parts = e.get("parts_of_base_median", {})
        if parts:
            names = {
                "aggregation_path": "replica-context all_reduce instead of "
                "OptimizerV2's default aggregation",
                "a_allreduce_squares": "(a) all-reduce of the squares",
                "b_gsnr_math_and_state": "(b) element-wise GSNR math and factor state "
                "(vr_nostats − sq)",
                "c_diagnostics_every_step": "(c) diagnostics on every step (vr − vr_nostats)",
            }
            lines += [
                "",
                "Extra time as a fraction of the base step (medians): "
                + "; ".join(f"{names.get(k, k)} {100 * x:+.1f}%" for k, x in parts.items())
                + ".",
            ]
        lines.append("")
        if "vr" in e["ratio"]:
            headline_ov.append(e)
    name = "overhead.png"
    if ov["timing"]:
        plot_overhead(ov, os.path.join(img_dir, name))
        lines += [f"![overhead ratios]({img_rel}/{name})", ""]
    for err in ov.get("bert_errors", []):
        lines += [f"A BERT-tiny row failed: `{err[:300]}`", ""]
    if ov.get("memory"):
        lines += [
            "### Peak memory",
            "",
            f"Method: {ov['memory_method']}. `tf.config.experimental.get_memory_info` "
            f"on CPU: {ov['tf_get_memory_info_cpu']}. 'increment' = peak RSS minus the "
            "RSS just before the model was built (TensorFlow's own footprint removed). "
            "Peak RSS on CPU includes graph construction and optimisation, which for "
            "these small models dwarfs the tensors.",
            "",
            "| model | pair | batch | variant | base peak MB | variant peak MB | "
            "peak ratio (min/median/max) | increment ratio (min/median/max) |",
            "|---|---|---:|---|---:|---:|---:|---:|",
        ]
        for m in ov["memory"]:
            for v, r in m.items():
                if not isinstance(r, dict) or "peak_ratio" not in r:
                    continue
                pr, ir = r["peak_ratio"], r["increment_ratio"]
                lines.append(
                    f"| {m['model']} | {PAIR_LABEL.get(m['pair'], m['pair'])} | "
                    f"{m['batch']} | {v} | {m['base_peak_mb_median']:.0f} | "
                    f"{r['peak_mb_median']:.0f} | {pr['min']:.3f} / {pr['median']:.3f}"
                    f" / {pr['max']:.3f} | {ir['min']:.2f} / {ir['median']:.2f} / "
                    f"{ir['max']:.2f} |"
                )
        lines.append("")


def _group_label(v, info):
    if v == "base":
        return "LAMB (base)"
    if info["vr"]:
        loop = f", {info['loop']} loop" if info.get("loop") and v.count("_") == 2 else ""
        return f"VR-LAMB m={info['m']}{loop}"
    return f"LAMB, {info['m']} groups summed (no VR)"


def plot_groups(gr, path):
    """Step-time ratio VR(m)/LAMB against m, one line per (model, devices, batch)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    styles = {1: "--", 8: "-"}
    colors = {"cnn1d": ["tab:blue", "tab:cyan"], "bert_tiny": ["tab:red"]}
    seen = {}
    for e in gr["timing"]:
        pts = sorted(
            (i["m"], e["ratio"][v])
            for v, i in e["variants"].items()
            if i["vr"] and v == f"vr_m{i['m']}"
        )
        if not pts:
            continue
        ms = [m for m, _ in pts]
        med = [r["median"] for _, r in pts]
        lo = [r["median"] - r["min"] for _, r in pts]
        hi = [r["max"] - r["median"] for _, r in pts]
        key = (e["model"], e["batch"])
        if key not in seen:
            seen[key] = len([k for k in seen if k[0] == e["model"]])
        cl = colors.get(e["model"], ["k"])
        ax.errorbar(
            ms,
            med,
            yerr=[lo, hi],
            capsize=2,
            marker="o",
            ms=3,
            ls=styles.get(e["devices"], ":"),
            color=cl[seen[key] % len(cl)],
            label=f"{e['model']} B={e['batch']}, {e['devices']} dev",
        )
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks([1, 2, 4, 8])
    ax.set_xticklabels(["1", "2", "4", "8"])
    ticks = [0.8, 1, 1.25, 1.5, 2, 3, 4, 6, 8]
    top = max([r["max"] for e in gr["timing"] for r in e["ratio"].values()] + [1.5])
    ax.set_yticks([t for t in ticks if t <= top * 1.2])
    ax.set_yticklabels([f"{t:g}" for t in ticks if t <= top * 1.2])
    ax.minorticks_off()
    ax.set_xlabel("micro-batch groups m per replica (k = devices x m)")
    ax.set_ylabel("step time VR-LAMB(m) / LAMB")
    ax.set_title(
        "Cost of micro-batch groups (median, min–max over interleaved reps;\n"
        "dashed: 1 device, solid: 8 devices)",
        fontsize=9,
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def groups_section(gr, img_rel, img_dir, lines):
    cfg = gr["config"]
    lines += [
        "## Micro-batch groups: cost",
        "",
        f"Command: `{gr['command']}`  ",
        f"Status: {'complete' if gr.get('complete') else '**partial**'}; wall time "
        f"{gr.get('elapsed_s', 0) / 60:.1f} min.",
        "",
        "VR-LAMB with m micro-batch groups per replica (k = devices x m GSNR samples; "
        "`apply_grouped_gradients`) against plain LAMB at the same global batch (one "
        "gradient per replica). m = 1 is VR-LAMB with `apply_gradients`, the "
        "reference row. Each replica splits its shard into m contiguous groups and "
        "computes each group's gradients at the same weights, one group after another; "
        "the gradients and their squares are summed. Step: " + gr["step"] + ". Loops "
        f"over the groups: cnn1d `{cfg['cnn_loop']}` (a Python loop, as "
        "`use_micro_batches`: m copies of the forward and backward pass in the graph), "
        f"bert_tiny `{cfg['bert_loop']}` (`tf.while_loop`, one copy whatever m). "
        "Timing as in the overhead section (variants side by side in one process, "
        "rotating order, ratios within a repetition; 'min/min' = fastest repetition "
        "over the fastest base). Peak memory: " + gr["memory_method"] + "; ratio to "
        "the base's child of the same repetition ('increment' = peak minus the RSS "
        "before the timed model was built), measured for cnn1d at batch "
        f"{cfg['memory_cnn_batch']} and BERT-tiny at batch {cfg['bert_batch']} with "
        f"{cfg['memory_reps']} child process(es) per variant and {cfg['memory_steps']}"
        " steps. 'build s' = building the variant and its first call (tracing and "
        "graph optimisation), once per process.",
        "",
    ]
    mem = {(m["model"], m["devices"]): m for m in gr.get("memory", [])}
    for e in gr["timing"]:
        mm = (
            mem.get((e["model"], e["devices"]))
            if (mem.get((e["model"], e["devices"]), {}).get("batch") == e["batch"])
            else None
        )
        seq = f", sequence {e['seq_len']}" if e.get("seq_len") else ""
        lines += [
            f"### {e['model']}, batch {e['batch']}{seq}, {e['devices']} device"
            f"{'s' if e['devices'] > 1 else ''} ({e['per_replica_batch']} per replica)",
            "",
            f"{e['params']:,} parameters; {e['reps']} repetitions of "
            f"{e['steps_per_call']} steps. {e['family']}."
            + (f" Data: {e['data']}." if e.get("data") else ""),
            "",
            "| variant | k | group size | step ms (median) | ratio median (min–max) | "
            "min/min | peak RSS ratio | increment ratio | build s | graph ops |",
            "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|",
        ]
        for v, info in e["variants"].items():
            r = e["ratio"][v]
            pr = ir = "—"
            if mm and isinstance(mm.get(v), dict):
                pr = f"{mm[v]['peak_ratio']['median']:.3f}"
                ir = f"{mm[v]['increment_ratio']['median']:.2f}"
            elif mm and v == "base":
                inc = (
                    np.median(
                        [r["maxrss_kb"] - r["rss_before_model_kb"] for r in mm["raw"]["base"]]
                    )
                    / 1024
                )
                pr, ir = f"{mm['base_peak_mb_median']:.0f} MB", f"{inc:.0f} MB"
            b = (e.get("build_s") or {}).get(v)
            lines.append(
                f"| {_group_label(v, info)} | {info['k'] or '—'} | {info['group_size']} | "
                f"{e['step_ms'][v]['median']:.1f} | "
                + ("1" if v == "base" else f"{r['median']:.3f} ({r['min']:.3f}–{r['max']:.3f})")
                + f" | {e['ratio_of_min'][v]:.3f} | {pr} | {ir} | "
                f"{'—' if b is None else f'{b:.0f}'} | {e['graph_ops'].get(v) or '—'} |"
            )
        checks = e.get("weights_check") or {}
        if checks:
            lines += [
                "",
                f"Weights after {e.get('steps_before_check', '?')} steps on the same "
                "batch, against a variant doing the same arithmetic in another order "
                "(rounding differences grow with the steps through LAMB's normalised "
                "update; max |Δ| / max |w|): "
                + "; ".join(
                    f"{v} vs {c['vs']} {c['max_abs_diff_rel']:.1e}" for v, c in checks.items()
                )
                + ".",
            ]
        lines.append("")
    for c in gr.get("cross_checks", []):
        lines += [
            f"Check, {c['model']} batch {c['batch']}, k = {c['k']}: {c['a']} vs {c['b']}:"
            f" final weights max |Δ| / max |w| = {c['max_abs_diff_rel']:.1e}.",
            "",
        ]
    for err in gr.get("errors", []):
        lines += [f"A row failed: `{err[:300]}`", ""]
    name = "groups_cost.png"
    if gr["timing"]:
        plot_groups(gr, os.path.join(img_dir, name))
        lines += [f"![micro-batch groups cost]({img_rel}/{name})", ""]


def write_readme_block(readme, headline, bert_headline, headline_ov, docs, img_dir, memory=()):
    """Replaces the README's text between README_BEGIN and README_END with the headline
    numbers (a table), the commands that made them and the main plots."""
    with open(readme) as f:
        text = f.read()
    if README_BEGIN not in text or README_END not in text:
        raise SystemExit(f"{readme}: no {README_BEGIN} ... {README_END} block to fill")
    rel = os.path.relpath(img_dir, os.path.dirname(os.path.abspath(readme)))
    lines = [
        "<!-- Generated by `python benchmarks/render.py`; do not edit by hand. -->",
        "",
        "Made by "
        + ", ".join(f"`{d['command']}`" for d in docs)
        + ", then `python benchmarks/render.py`; every table, the method and the caveats: "
        "[docs/results.md](docs/results.md).",
        "",
    ]
    if headline:
        lines += [
            "| data | pair | largest batch | base test % | VR test % | Δ test (pp) | "
            "verdict | Δ gap (pp) | seeds |",
            "|---|---|---:|---:|---:|---:|---|---:|---:|",
        ]
        for ds, pair, b, dt, dg, n, base_acc, vr_acc in headline:
            lines.append(
                f"| {ds} | {PAIR_LABEL[pair]} vs {VR_LABEL[pair]} | {b} | "
                f"{pm(base_acc)} | {pm(vr_acc)} | {pm(dt)} | {verdict(dt)} | "
                f"{pm(dg)} | {n} |"
            )
        lines.append("")
    lines += bert_headline
    for e in headline_ov:
        r = e["ratio"]["vr"]
        nostats = e["ratio"].get("vr_nostats")
        lines.append(
            f"- Step time VR/base, {e['model']} {PAIR_LABEL.get(e['pair'], e['pair'])}, batch "
            f"{e['batch']}, {e['replicas']} CPU replicas: {r['median']:.3f} median "
            f"({r['min']:.3f}–{r['max']:.3f})"
            + (f"; {nostats['median']:.3f} with `statistics_interval=0`" if nostats else "")
            + "."
        )
    for m in memory:
        r = m.get("vr")
        if isinstance(r, dict) and "peak_ratio" in r:
            pr = r["peak_ratio"]
            lines.append(
                f"- Peak memory (process RSS) VR/base, {m['model']} "
                f"{PAIR_LABEL.get(m['pair'], m['pair'])}, batch {m['batch']}: "
                f"{pr['median']:.3f} median ({pr['min']:.3f}–{pr['max']:.3f})."
            )
    lines.append("")
    for name, alt in (
        ("acc_vs_batch_mnist1d.png", "test accuracy and gap vs batch"),
        ("bert_mlm.png", "BERT-tiny MLM"),
        ("overhead.png", "overhead"),
    ):
        if os.path.exists(os.path.join(img_dir, name)):
            lines.append(f"![{alt}]({rel}/{name})")
    block = "\n".join(lines).rstrip()
    start = text.index(README_BEGIN) + len(README_BEGIN)
    end = text.index(README_END)
    with open(readme, "w") as f:
        f.write(text[:start] + "\n" + block + "\n" + text[end:])
    print(f"updated the results block of {readme}")


def main(argv):
    del argv
    sweep_path = FLAGS.sweep or os.path.join(
        RESULTS, "sweep_quick.json" if FLAGS.quick else "sweep.json"
    )
    ov_path = FLAGS.overhead or os.path.join(
        RESULTS, "overhead_quick.json" if FLAGS.quick else "overhead.json"
    )
    bert_path = FLAGS.bert or os.path.join(
        RESULTS, "bert_mlm_quick.json" if FLAGS.quick else "bert_mlm.json"
    )
    groups_path = FLAGS.groups or os.path.join(
        RESULTS, "groups_quick.json" if FLAGS.quick else "groups.json"
    )
    groups = _load(groups_path)
    sweep, ov, bert = _load(sweep_path), _load(ov_path), _load(bert_path)
    probes = [(p, d) for p in FLAGS.lr_probes if (d := _load(os.path.join(RESULTS, p))) is not None]
    if FLAGS.out_md is None:
        FLAGS.out_md = os.path.join(
            REPO, "docs", "results_quick.md" if FLAGS.quick else "results.md"
        )
    if FLAGS.images_dir is None:
        FLAGS.images_dir = os.path.join(REPO, "docs", "images", *(["quick"] if FLAGS.quick else []))
    os.makedirs(FLAGS.images_dir, exist_ok=True)
    img_rel = os.path.relpath(FLAGS.images_dir, os.path.dirname(os.path.abspath(FLAGS.out_md)))
    body, headline, headline_ov = [], [], []
    body.append(
        render_evidence.render(os.path.join(RESULTS, "evidence"), FLAGS.images_dir, img_rel)
    )
    if sweep:
        sweep_sections(sweep, img_rel, FLAGS.images_dir, body, headline)
    bert_headline = []
    if bert and bert.get("runs"):
        bert_section(bert, img_rel, FLAGS.images_dir, body, bert_headline)
    if ov:
        overhead_section(ov, img_rel, FLAGS.images_dir, body, headline_ov)
    if groups and groups.get("timing"):
        groups_section(groups, img_rel, FLAGS.images_dir, body)
    if probes and not FLAGS.quick:
        lr_probe_section(probes, body)

    quick = (sweep or {}).get("config", {}).get("quick") or (ov or {}).get("config", {}).get(
        "quick"
    )
    env = (sweep or ov or {}).get("environment", {})
    head = [
        "# VRGD benchmark results",
        "",
        "<!-- Generated by benchmarks/render.py from benchmarks/results/*.json; do not "
        "edit by hand. -->",
        "",
    ]
    if quick:
        head += [
            "> **These are `--quick` results** (small data, few epochs, 2 seeds): a smoke "
            "test of the pipeline, not evidence. Render the full runs for conclusions.",
            "",
        ]
    head += [
        f"Rendered with `python benchmarks/render.py{' --quick' if FLAGS.quick else ''}`"
        f" from `{os.path.relpath(sweep_path, REPO)}` and "
        f"`{os.path.relpath(ov_path, REPO)}`"
        + (f" and `{os.path.relpath(bert_path, REPO)}`" if bert else "")
        + f". Machine: {env.get('platform')}, "
        f"{env.get('cpu_count')} CPU cores, TensorFlow {env.get('tensorflow')}, Keras "
        f"{env.get('keras')}; load average at the start "
        f"{env.get('loadavg_at_start')} (the cores were shared, so absolute times are "
        "noisy; ratios are measured within one process).",
        "",
        "Replicas are logical CPU devices of one host: the maths of k-replica data "
        "parallelism is exact, but the all-reduce is an in-memory copy-and-add, not a "
        "network collective, and the k replicas share 2 cores, so step-time ratios "
        "reflect per-op overheads more than communication.",
        "",
    ]
    if headline or headline_ov or bert_headline:
        head += ["## Headline", ""]
        for ds, pair, b, dt, dg, n, _, _ in headline:
            head.append(
                f"- {ds}, {PAIR_LABEL[pair]}, largest batch {b}: VR − base test "
                f"accuracy {pm(dt)} pp ({verdict(dt)}), gap Δ {pm(dg)} pp "
                f"({verdict(dg, higher_is_better=False)}; negative = smaller gap with VR), "
                f"{n} seeds."
            )
        head += bert_headline
        for e in headline_ov:
            r = e["ratio"]["vr"]
            extra = ""
            if "vr_nostats" in e["ratio"]:
                extra = f"; with statistics_interval=0 {e['ratio']['vr_nostats']['median']:.3f}"
            head.append(
                f"- Step time VR/base, {e['model']} {PAIR_LABEL.get(e['pair'], e['pair'])}"
                f" batch {e['batch']}: median {r['median']:.3f} (min {r['min']:.3f}, "
                f"max {r['max']:.3f}){extra}."
            )
        head.append("")
    text = "\n".join(head + body).rstrip() + "\n"
    readme = FLAGS.readme or (None if FLAGS.quick else os.path.join(REPO, "README.md"))
    if readme:
        write_readme_block(
            readme,
            headline,
            bert_headline,
            headline_ov,
            [p for p in (sweep, bert, ov) if p],
            FLAGS.images_dir,
            (ov or {}).get("memory", []),
        )
    os.makedirs(os.path.dirname(os.path.abspath(FLAGS.out_md)), exist_ok=True)
    with open(FLAGS.out_md, "w") as f:
        f.write(text)
    print(f"wrote {FLAGS.out_md} and {FLAGS.images_dir}/*.png")


if __name__ == "__main__":
    app.run(main)
