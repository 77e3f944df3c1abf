"""Sparse gradients: exact statistics on the touched rows.

Input: ``overhead.py --models=embedding,bert_tiny``'s JSON
(``benchmarks/results/overhead_sparse.json``, ``--overhead_sparse``); full report only."""

import os

from absl import flags

from report.common import PAIR_LABEL, RESULTS, VARIANT_LABEL, load, load_average

flags.DEFINE_string(
    "overhead_sparse",
    None,
    "Sparse-statistics overhead JSON (overhead.py --models=embedding,bert_tiny; default "
    "benchmarks/results/overhead_sparse.json, not with --quick).",
)


def render(ctx, lines):
    """Step-time and peak-memory ratios to the base, with ``vr_dense`` (the dense statistics
    of a sparse gradient, as before the sparse path) beside ``vr``."""
    path = flags.FLAGS.overhead_sparse
    if ctx.quick and not path:
        return
    sp = load(path or os.path.join(RESULTS, "overhead_sparse.json"))
    if not (sp and sp.get("timing")):
        return
    label = dict(VARIANT_LABEL, vr_dense="VR-X with the dense statistics of the sparse gradient")
    lines += [
        "## Sparse gradients: exact statistics on the touched rows",
        "",
        f"Command: `{sp['command']}`  ",
        f"Status: {'complete' if sp.get('complete') else '**partial**'}; wall time "
        f"{sp.get('elapsed_s', 0) / 60:.1f} min; load average at the start "
        f"{load_average(sp.get('environment'))}.",
        "",
        "Method as in the overhead section (variants side by side in one process, ratios "
        "within a repetition; peak memory VmHWM of one subprocess per variant and "
        "repetition). `embedding`: a Keras 3 model whose parameters are almost all one "
        "embedding table with a `tf.IndexedSlices` gradient; `vr_dense` makes that gradient "
        "dense for the statistics (the library before the sparse statistics). BERT-tiny's "
        "word embedding gets a dense gradient (its masked-LM head is tied to it), so the "
        "sparse statistics do not apply there: its rows measure the dense path. The embedding "
        "variants are timed one child process each, beside their own base (hence one base row "
        "per variant). VR-Adam keeps its default `beta_3=0.9`: a float32 deficit of the "
        "table's shape on every replica (1 GB over 8 replicas here), decayed densely each "
        "step.",
        "",
        "| model | pair | batch | replicas | parameters | variant | step ms (median) | "
        "ratio median (min / max) | weights vs reference |",
        "|---|---|---:|---:|---:|---|---:|---:|---|",
    ]
    for e in sp.get("timing", []):
        for v, r in e["ratio"].items():
            wc = e.get("weights_check", {}).get(v)
            lines.append(
                f"| {e['model']} | {PAIR_LABEL.get(e['pair'], e['pair'])} | {e['batch']} | "
                f"{e['replicas']} | {e['params']:,} | {label.get(v, v)} | "
                f"{e['step_ms'][v]['median']:.1f} | {_spread(r)} | "
                + (f"{wc['max_abs_diff_rel']:.1e} vs {wc['vs']}" if wc else "")
                + " |"
            )
    if sp.get("memory"):
        lines += [
            "",
            "| model | pair | batch | variant | base peak MB | variant peak MB | "
            "peak ratio median (min / max) |",
            "|---|---|---:|---|---:|---:|---:|",
        ]
        for m in sp["memory"]:
            for v, r in m.items():
                if not isinstance(r, dict) or "peak_ratio" not in r:
                    continue
                pr = r["peak_ratio"]
                lines.append(
                    f"| {m['model']} | {PAIR_LABEL.get(m['pair'], m['pair'])} | {m['batch']} "
                    f"| {label.get(v, v)} | {m['base_peak_mb_median']:.0f} | "
                    f"{r['peak_mb_median']:.0f} | {_spread(pr)} |"
                )
    _remeasured(sp.get("remeasured", []), label, lines)
    mem = load(os.path.join(RESULTS, "overhead_bert_memory.json"))
    _memory_parts(mem, lines)
    _tensor_memory(load(os.path.join(RESULTS, "overhead_bert_tensor_memory.json")), ctx, lines)
    _readme_bert(sp.get("remeasured", []), mem, ctx.readme_lines)
    _gsnr_memory(load(os.path.join(RESULTS, "gsnr_memory.json")), lines)
    for err in sp.get("bert_errors", []):
        lines += ["", f"A BERT-tiny row failed: `{err[:300]}`"]
    lines.append("")


def _spread(summary) -> str:
    """A ratio's ``timing.summarize`` record as table text: ``median (min / max)``."""
    return f"{summary['median']:.3f} ({summary['min']:.3f} / {summary['max']:.3f})"


def _readme_bert(runs, mem, readme_lines):
    """The newest BERT-tiny step-time re-measure and memory-by-part run, for the README."""
    timing = [e for run in runs for e in run["timing"] if e["model"] == "bert_tiny"]
    if not timing:
        return
    r = timing[-1]["ratio"]
    text = (
        f"- BERT-tiny LAMB, batch {timing[-1]['batch']}, 8 CPU replicas, re-measured on the "
        f"current code (supersedes the bert_tiny lines above): step time VR/base "
        f"{r['vr']['median']:.3f} ({r['vr']['min']:.3f}–{r['vr']['max']:.3f}), "
        f"{r['vr_nostats']['median']:.3f} with `statistics_interval=0`"
    )
    m = (mem or {}).get("memory", [{}])[0]
    if "vr" in m:
        text += f"; peak memory {m['vr']['peak_ratio']['median']:.3f}"
        if "vr_nostats_beta3_0" in m:
            text += (
                f", {m['vr_nostats_beta3_0']['peak_ratio']['median']:.3f} with `beta_3=0` and "
                "`statistics_interval=0`"
            )
    readme_lines.append(
        text + " (why: [docs/cost_model.md](docs/cost_model.md#5-memory-per-replica))."
    )


def _memory_parts(doc, lines):
    """BERT-tiny's peak memory split into parts (``overhead_bert_memory.json``): the base
    with the squares' all-reduce alone (``sq``), then VR without and with the factor state
    (``beta_3``) and the diagnostics."""
    if not (doc and doc.get("memory")):
        return
    m = doc["memory"][0]
    base_mb = m["base_peak_mb_median"]
    lines += [
        "",
        f"BERT-tiny peak memory by part (`{doc['command']}`, kept as "
        "`benchmarks/results/overhead_bert_memory.json`; VmHWM of one subprocess per "
        f"variant and repetition, {doc['config']['memory_reps']} repetitions; base peak "
        f"{base_mb:.0f} MB; 8 replicas in one process, so every [N] tensor a replica holds "
        "counts 8 times: 140 MB for BERT-tiny's 4.4 M parameters). The squares' all-reduce "
        "alone, then VR-LAMB without factor state (`beta_3=0`) and diagnostics, with "
        "diagnostics, with the factor state (the default `beta_3=0.9`) and both:",
        "",
        "| variant | peak MB (median) | over base MB | peak ratio median (min / max) |",
        "|---|---:|---:|---:|",
        f"| {VARIANT_LABEL['base']} | {base_mb:.0f} | 0 | 1 |",
    ]
    for v in doc["config"]["memory_variants"]:
        r = m.get(v)
        if v == "base" or not isinstance(r, dict):
            continue
        pr = r["peak_ratio"]
        lines.append(
            f"| {VARIANT_LABEL.get(v, v)} | {r['peak_mb_median']:.0f} | "
            f"{r['peak_mb_median'] - base_mb:.0f} | {_spread(pr)} |"
        )


def _tensor_memory(doc, ctx, lines):
    """BERT-tiny's peak memory twice (``overhead_bert_tensor_memory.json``, children under
    TensorFlow's BFC CPU allocator): the tensors' own peak, against issue 39's 1.30, and
    the process's peak RSS; the README's memory bullet gets the defaults' two ratios."""
    entries = [m for m in (doc or {}).get("memory", []) if m["model"] == "bert_tiny"]
    if not entries or "base_tensor_peak_mb_median" not in entries[0]:
        return
    m = entries[0]
    lines += [
        "",
        f"BERT-tiny peak memory at batch {m['batch']}, tensors and process "
        f"(`{doc['command']}`, kept as "
        "`benchmarks/results/overhead_bert_tensor_memory.json`; "
        f"{doc['config']['memory_reps']} subprocesses per variant under TensorFlow's BFC CPU "
        "allocator, ratios per repetition). The tensors' peak is the allocator's own (every "
        "replica's tensors and XLA's buffers): what an accelerator's memory holds, and what "
        "issue 39's target of 1.30 bounds. Peak RSS adds the traced graphs, their kernels "
        "and one compiled XLA cluster per replica, host memory on an accelerator "
        "([cost model](cost_model.md), section 6.6). Base: "
        f"{m['base_tensor_peak_mb_median']:.0f} MB of tensors in a "
        f"{m['base_peak_mb_median']:.0f} MB process.",
        "",
        "| variant | tensors' peak MB | tensors' ratio median (min / max) | peak RSS MB | "
        "RSS ratio median (min / max) |",
        "|---|---:|---:|---:|---:|",
    ]
    for v in doc["config"]["memory_variants"]:
        r = m.get(v)
        if v == "base" or not isinstance(r, dict) or "tensor_peak_ratio" not in r:
            continue
        tr, pr = r["tensor_peak_ratio"], r["peak_ratio"]
        lines.append(
            f"| {VARIANT_LABEL.get(v, v)} | {r['tensor_peak_mb_median']:.0f} | "
            f"{_spread(tr)} | {r['peak_mb_median']:.0f} | {_spread(pr)} |"
        )
    if isinstance(m.get("vr_default"), dict) and "tensor_peak_ratio" in m["vr_default"]:
        r = m["vr_default"]
        ctx.readme_memory = (
            f"; BERT-tiny with the defaults at batch {m['batch']}: tensors "
            f"{r['tensor_peak_ratio']['median']:.2f}, process RSS "
            f"{r['peak_ratio']['median']:.2f} (graphs and one XLA cluster per CPU replica)"
        )


def _gsnr_memory(doc, lines):
    """``gsnr_memory.py``: [N] tensors alive at the peak of variance_reduce alone, this
    checkout and (``before``) an earlier one."""
    if not (doc and doc.get("rows")):
        return
    before = {
        (r["beta_3"], r["diagnostics"], r["inter_op_threads"]): r["tensors"]
        for r in doc.get("before", {}).get("rows", [])
    }
    lines += [
        "",
        f"The same parts in `variance_reduce` alone (`{doc['command']}`: BERT-tiny's "
        "variable sizes, one replica with two micro-batch groups; peak RSS over the RSS "
        "before the first step, in tensors of N float32). One process per row; with "
        "TensorFlow's default inter-op parallelism the count varies between runs by 1 to 1.5, "
        "with one inter-op thread it is the graph's own:",
        "",
        "| beta_3 | diagnostics | inter-op threads | [N] tensors | before |",
        "|---:|---|---|---:|---:|",
    ]
    for r in doc["rows"]:
        key = (r["beta_3"], r["diagnostics"], r["inter_op_threads"])
        old = f"{before[key]:.1f}" if key in before else ""
        lines.append(
            f"| {r['beta_3']:g} | {'every step' if r['diagnostics'] else 'off'} | "
            f"{r['inter_op_threads'] or 'default'} | {r['tensors']:.1f} | {old} |"
        )
    if doc.get("before"):
        lines += ["", f"Before: {doc['before']['label']}."]


def _remeasured(runs, label, lines):
    """Later runs of the same rows (``remeasured``: label, command, timing, memory), so that
    the spread between runs on this shared machine is in the report."""
    if not runs:
        return
    lines += [
        "",
        "Re-measured later, same command (BERT-tiny rows only); the spread between runs is "
        "the machine's, not the code's:",
        "",
        "| run | variant | step ms (median) | ratio median (min / max) | peak ratio median |",
        "|---|---|---:|---:|---:|",
    ]
    for run in runs:
        peaks = {
            v: r["peak_ratio"]["median"]
            for m in run.get("memory", [])
            for v, r in m.items()
            if isinstance(r, dict) and "peak_ratio" in r
        }
        for e in run["timing"]:
            for v, r in e["ratio"].items():
                peak = f"{peaks[v]:.3f}" if v in peaks else ""
                lines.append(
                    f"| {run['label']} | {label.get(v, v)} | {e['step_ms'][v]['median']:.1f} | "
                    f"{r['median']:.3f} ({r['min']:.3f} / {r['max']:.3f}) | {peak} |"
                )
    lines += ["", "Commands: " + "; ".join(f"`{run['command']}`" for run in runs) + "."]
