"""Over a real collective (``loopback.py``).

Input: ``benchmarks/results/loopback.json`` (``loopback_quick.json`` with ``--quick``;
``--loopback``). Adds one line per model to the README block (``ctx.readme_lines``)."""

from absl import flags

from report.common import load

flags.DEFINE_string("loopback", None, "Loopback collective JSON (default from --quick).")


def render(ctx, lines):
    lb = ctx.result("loopback") if flags.FLAGS.loopback is None else load(flags.FLAGS.loopback)
    loopback_section(lb, lines, ctx.readme_lines)
    ctx.readme_lines.append(
        "- Cost model (bytes and element-wise work per step): [docs/cost_model.md]"
        "(docs/cost_model.md)."
    )


def loopback_section(lb, lines, readme_lines=None):
    """The loopback-collective timing (``loopback.py``) as markdown appended to ``lines``;
    one short line per model to ``readme_lines``. Self-contained: reads only its JSON."""
    label = {
        "base": "base X",
        "base_2x": "base X, model with 2x the parameters (VR's bytes on the wire)",
        "sq": "X + float32 all-reduce of the squares (8 N bytes)",
        "sq_split": "X + float32 x and x*x in two all-reduce calls (8 N bytes)",
        "sq_bf16": "X + bfloat16 all-reduce of the squares (6 N bytes)",
        "vr_nostats": "VR-X, float32 squares, statistics_interval=0",
        "vr": "VR-X, float32 squares, diagnostics every step",
        "vr_bf16": 'VR-X, `squares_dtype="bfloat16"`',
    }
    if lb and lb.get("timing"):
        cfg = lb.get("config", {})
        lines += [
            "## Over a real collective: two workers on 127.0.0.1",
            "",
            "Made by "
            + ", ".join(f"`{c}`" for c in lb.get("earlier_commands", []) + [lb.get("command")])
            + ". Two worker processes of "
            "`MultiWorkerMirroredStrategy` (one CPU replica each, k = 2) on the loopback "
            "interface: every step's all-reduce goes through TensorFlow's collective ops "
            "over gRPC, so the bytes are really sent (the other sections sum replicas in one "
            "process). Every variant is built side by side in each worker from the same "
            "weights and a fixed batch; each of "
            f"{cfg.get('reps')} repetitions times every variant once ({cfg.get('steps')} "
            "steps per call), in an order rotated by one per repetition; ratios are taken "
            "within a repetition (median, min–max). Payload = bytes each worker "
            "all-reduces per step, from the variable sizes (a 2-worker ring sends and "
            "receives that much). The two workers share the machine's 2 cores, which other "
            "jobs also used. Cost model: [cost_model.md](cost_model.md).",
            "",
            "Rows labelled *before* ran with the library's earlier single all-reduce of one "
            "`[x, x*x]` buffer; *after* with the gradients and the squares in two calls "
            "(as `vrgd_tf.gsnr.collectives.all_reduce_samples` makes them; the recorded `sq` "
            "rows ran without the step's one-scalar count beside the squares). `sq_split` in "
            "the before rows is that "
            "change measured alone. `bytes_per_pack` > 0: "
            "`CommunicationOptions(bytes_per_pack=...)` splits each call's tensors into packs, "
            "which helps the base on the 2x model (its gradients are many tensors) but cannot "
            "split VR's single `[N]` buffers. VR with bfloat16 squares ends with other weights "
            "than with float32 squares at k = 2: the factors differ there (see the "
            "bfloat16 squares section of the earlier sweeps above).",
            "",
        ]
        for e in lb["timing"]:
            raw = e["raw_step_s"]
            lines += [
                f"### {e['model']}, {e.get('family', '')}, {e['collective']} collective"
                + (f" ({e['label']})" if e.get("label") else ""),
                "",
                f"{e['params'] / 1e6:.1f} M parameters (2x model: "
                f"{(e.get('params_2x') or 0) / 1e6:.1f} M), "
                f"{e.get('per_worker_batch')} examples per worker, {e['workers']} workers.",
                "",
                "| variant | payload MB | step ms (median) | / base (same model) | "
                "/ base_2x (same bytes) |",
                "|---|---:|---:|---:|---:|",
            ]
            for v in raw:
                r = e["ratio"][v]
                sb = e.get("ratio_same_bytes", {}).get(v)
                lines.append(
                    f"| {label.get(v, v)} | {e['allreduce_payload_bytes'][v] / 1e6:.1f} | "
                    f"{e['step_ms'][v]['median']:.0f} | {r['median']:.3f} "
                    f"({r['min']:.2f}–{r['max']:.2f}) | "
                    + (f"{sb['median']:.3f} ({sb['min']:.2f}–{sb['max']:.2f})" if sb else "–")
                    + " |"
                )
            lines.append("")
            if "vr" in raw and "vr_bf16" in raw:
                q = sorted(a / b for a, b in zip(raw["vr_bf16"], raw["vr"]))
                lines += [
                    "bfloat16 squares / float32 squares (VR step time, per repetition): "
                    f"median {q[len(q) // 2]:.3f} ({q[0]:.2f}–{q[-1]:.2f}).",
                    "",
                ]
            wc = e.get("weights_check", {})
            if wc:
                lines += [
                    "Final weights agree: "
                    + ", ".join(
                        f"{v} vs {c['vs']} {c['max_abs_diff_rel']:.1e}" for v, c in wc.items()
                    )
                    + " (max |Δ| / max |w|).",
                    "",
                ]
            latest = [
                x
                for x in lb["timing"]
                if (x["model"], x["collective"], x.get("bytes_per_pack", 0))
                == (e["model"], e["collective"], e.get("bytes_per_pack", 0))
            ][-1]
            if (
                readme_lines is not None
                and "vr" in e["ratio"]
                and latest is e
                and e["collective"] == "RING"
                and not e.get("bytes_per_pack")
            ):
                sb = e.get("ratio_same_bytes", {})
                text = (
                    f"- Over a real collective (`benchmarks/loopback.py`: 2 workers of "
                    f"MultiWorkerMirroredStrategy on 127.0.0.1, {e['collective']}), "
                    f"{e['model']}: VR/base {e['ratio']['vr']['median']:.2f}"
                )
                if "vr" in sb:
                    text += f", VR/base with 2x parameters (same bytes) {sb['vr']['median']:.2f}"
                if "vr_bf16" in e["ratio"]:
                    text += (
                        f"; VR with bfloat16 squares / base {e['ratio']['vr_bf16']['median']:.2f}"
                    )
                readme_lines.append(text + ".")
        for err in lb.get("errors", []):
            lines += [f"- Failed: {err.splitlines()[0]}", ""]
