"""Round 4's section of docs/results.md (studies/evidence/PROTOCOL4.md), from
``studies/evidence/results/round4/`` (``tune.json``, ``final.json``, ``reference.json`` of
``studies/evidence/round4.py``).

Whatever runs exist are shown with their count. While tuning runs: each arm's mean validation
accuracy per rate so far. Once a pair's tuning is complete: the registered choice
(``protocol4.choose``: edge rule, stability guard, re-pilot stop, E2's target), computed
again here from the runs. While the final phase runs: its count only (no test accuracy is
summarised before a pair's 72 final runs are in). Then the registered endpoints
(``stats4``): E1 with Holm, TOST and the sensitivity analyses, the readout in a user's words,
E2 (epochs to the target), E3 (the generalization gap, read with E1) and E4 (collapses).
"""

import math
import os

import evidence_stats as es
import numpy as np
import protocol3 as p3
import protocol4 as p4
import stats4
from protocol4 import ARM_LABEL, ARMS

from report import round3

RESULTS = os.path.join(os.path.dirname(round3.RESULTS), "round4")
PAIR_LABEL = {"momentum": "Momentum", "lars": "LARS"}
CONTRASTS = (("vr", "base"), ("vr", "scalar_vr"))
#: The paired SD (pp) n was planned on (PROTOCOL4.md section 4).
PLANNING_SD = 0.6
HEADING = (
    "### Round 4: does VRGD help where large batch starts to cost accuracy? "
    f"(batch {p4.BATCH}, pre-registered)"
)


def _keys(pair, grid):
    return {p4.run_key(pair, a, lr, s) for a in ARMS for lr in grid for s in p4.TUNE_SEEDS}


def status(tune, final, pair):
    """``{"text", "grid", "choice", "by_arm", "complete"}`` of one pair: the progress in
    words, the current grid, the registered choice (None while tuning runs) and the final
    runs ``{arm: {seed: run}}`` at each arm's chosen rate."""
    runs = (tune or {}).get("runs", {})
    grid, _ = p4.tune_grid(runs, pair)
    done = len(_keys(pair, grid) & set(runs))
    out = {"grid": grid, "choice": p4.choose(runs, pair), "by_arm": None, "complete": False}
    if out["choice"] is None:
        return dict(out, text=f"tuning in progress: {done} of {len(_keys(pair, grid))} runs")
    if out["choice"]["repilot"]:
        return dict(
            out,
            text=f"stopped after tuning ({done} runs): a base run collapsed at its chosen rate, re-pilot",
        )
    by_arm = {a: {} for a in ARMS}
    for a in ARMS:
        for r in round3.runs_of(final, pair, arm=a, peak_lr=out["choice"]["best"][a]):
            if r["seed"] in p4.FINAL_SEEDS:
                by_arm[a][r["seed"]] = r
    fdone, planned = sum(map(len, by_arm.values())), len(ARMS) * len(p4.FINAL_SEEDS)
    out.update(by_arm=by_arm, complete=fdone == planned)
    if fdone < planned:
        return dict(out, text=f"tuning done ({done} runs); final phase: {fdone} of {planned} runs")
    return dict(out, text=f"complete: {done} tuning and {fdone} final runs")


def column(by_arm, arm, field):
    """``field`` of ``arm``'s final runs, in seed order."""
    return [by_arm[arm][s]["final"][field] for s in p4.FINAL_SEEDS]


def epochs(by_arm, arm, target):
    """E2 per run of ``arm``, in seed order: the first epoch reaching ``target`` (41 if
    none)."""
    return [
        stats4.epochs_to_target([c["val_acc"] for c in by_arm[arm][s]["curve"]], target, p4.EPOCHS)
        for s in p4.FINAL_SEEDS
    ]


def endpoints(by_arm, target):
    """The registered endpoints from a pair's complete final runs and E2's target:
    ``{"e1", "readout", "e2", "epochs", "e3", "e4", "collapses"}`` (section 5 of
    PROTOCOL4.md)."""

    def deltas(a, b, field):
        return list(np.subtract(column(by_arm, a, field), column(by_arm, b, field)))

    e1 = stats4.e1_family({f"{a}-{b}": deltas(a, b, "test_acc") for a, b in CONTRASTS})
    ep = {a: epochs(by_arm, a, target) for a in ARMS}
    val = {a: column(by_arm, a, "val_acc") for a in ARMS}
    return {
        "e1": e1,
        "readout": stats4.readout(*(e1[f"{a}-{b}"]["words"] for a, b in CONTRASTS)),
        "e2": stats4.e2_family(ep, CONTRASTS),
        "epochs": ep,
        "e3": es.paired_summary(deltas("vr", "base", "gap")),
        "e4": es.collapse_test(val["base"], val["vr"], p4.COLLAPSE_BELOW),
        "collapses": {a: sum(not (v >= p4.COLLAPSE_BELOW) for v in val[a]) for a in ARMS},
        "final_val": {a: float(np.mean(val[a])) for a in ARMS},
    }


def _ci(lo, hi, fmt="+.2f"):
    return f"95 % CI [{lo:{fmt}}, {hi:{fmt}}]"


def p_text(p):
    """A p-value to 3 significant digits, more where 3 would round it across 0.05 (0.04996
    reads 0.04996, not 0.05 beside "better")."""
    text = f"{p:.3g}"
    for digits in (4, 5, 6):
        if not math.isfinite(p) or (float(text) < 0.05) == (p < 0.05):
            break
        text = f"{p:.{digits}g}"
    return text


def median_epochs(epochs):
    """The median of epochs to the target, or None where half or more of the runs never
    reach it (censored at 41): then the median is not observed."""
    never = sum(x > p4.EPOCHS for x in epochs)
    return float(np.median(epochs)) if 2 * never < len(epochs) else None


def e2_words_text(s):
    """An E2 contrast's registered words; "no speed-up" (its CI inside ±log2(1.25)) with
    Holm p < 0.05 adds on which side the detected difference lies."""
    if s["words"] == "no speed-up" and s["p_t_holm"] < 0.05:
        side = "sooner" if s["mean"] > 0 else "later"
        return f"no speed-up, but VR detectably {side}, by less than 1.25x"
    return s["words"]


def e2_ratio(s):
    """An E2 contrast's geometric mean ratio with its 95 % CI (the log2 CI as ratios)."""
    lo, hi = (2.0**v for v in s["t_ci"])
    return f"{s['ratio']:.3f}x, {_ci(lo, hi, '.3f')}"


def e2_summary(s):
    """An E2 contrast's ratio with its 95 % CI and Holm p."""
    return f"{e2_ratio(s)}, Holm p {p_text(s['p_t_holm'])}"


def bold_word(s):
    """An E1 contrast's registered word in bold, with the side of 0 when an "equivalent"
    CI excludes it (round 3's words: "**equivalent**, but slightly lower: CI below 0")."""
    return round3._word(s).replace(s["words"], f"**{s['words']}**", 1)


def e1_lines(by_arm, ends):
    """Markdown lines of E1: each arm's test accuracy, both contrasts, the readout."""
    lines = ["**E1 (primary), final test accuracy** (24 seeds per arm, mean ± sd, median):", ""]
    for a in ARMS:
        acc = column(by_arm, a, "test_acc")
        lines.append(
            f"- {ARM_LABEL[a]}: {np.mean(acc):.2f} ± {np.std(acc, ddof=1):.2f} %, median "
            f"{np.median(acc):.2f} %"
        )
    lines += ["", "Contrasts, paired by seed (Holm over the two; margin ±0.5 pp):", ""]
    for a, b in CONTRASTS:
        s = ends["e1"][f"{a}-{b}"]
        d = np.subtract(column(by_arm, a, "test_acc"), column(by_arm, b, "test_acc"))
        lines.append(
            f"- {ARM_LABEL[a]} − {ARM_LABEL[b]}: {s['mean']:+.2f} pp ({round3.seeds_text(d)}), "
            f"{_ci(*s['t_ci'])}; t-test p {p_text(s['p_t'])} (Holm {p_text(s['p_t_holm'])}), "
            f"TOST p {p_text(s['p_tost'])} (Holm {p_text(s['p_tost_holm'])}): {bold_word(s)}. "
            f"Sensitivity: Wilcoxon p {p_text(s['p_wilcoxon'])}, Hodges-Lehmann {s['hl']:+.2f} pp, "
            f"{_ci(*s['hl_ci'])}."
        )
    lines += ["", f"**Registered readout: {ends['readout']}.**", ""]
    return lines + (power_lines(ends["e1"]) if ends["readout"] == "inconclusive" else [])


def power_lines(e1):
    """What an inconclusive E1 (``e1``: ``stats4.e1_family``'s summaries) says of n
    (descriptive, not registered): each contrast's observed paired SD beside the planning
    SD n was fixed on, and the pairs a ±0.5 pp half width would need at the larger
    (``evidence_stats.pairs_for_half_width``)."""
    sd = [e1[f"{a}-{b}"]["sd"] for a, b in CONTRASTS]
    sds = " and ".join(
        f"{s:.2f} pp for {ARM_LABEL[a]} − {ARM_LABEL[b]}" for (a, b), s in zip(CONTRASTS, sd)
    )
    big, margin = max(sd), stats4.MARGIN_PP
    return [
        f"Descriptive, not registered: the paired SD was {sds}, {big / PLANNING_SD:.1f} times "
        f"the {PLANNING_SD:g} pp that n = {len(p4.FINAL_SEEDS)} was planned on (PROTOCOL4.md "
        f"section 4); at the larger, about {es.pairs_for_half_width(big, margin)} pairs would "
        f"give a ±{margin:g} pp half width.",
        "",
    ]


def e2_lines(ends, target):
    """Markdown lines of E2: epochs to the target per arm, both contrasts as ratios."""
    lines = [
        f"**E2, speed-up**: the first epoch whose validation accuracy reaches {target:.2f} % "
        "(the base's tuned mean minus 0.5 pp, fixed from the tuning runs); 41 = never "
        "(censored at the budget of 40):",
        "",
    ]
    for a in ARMS:
        e = ends["epochs"][a]
        never = sum(x > p4.EPOCHS for x in e)
        m = median_epochs(e)
        median = "not reached (half or more never)" if m is None else f"{m:g} epochs"
        lines.append(
            f"- {ARM_LABEL[a]}: median {median} (range {min(e)}-{max(e)})"
            + (f", {never} of {len(e)} never" if never else "")
        )
    lines += ["", "Ratios of epochs to the target (> 1: VR sooner; Holm over the two):", ""]
    for a, b in CONTRASTS:
        s = ends["e2"][f"{a}-{b}"]
        words = e2_words_text(s).replace(s["words"], f"**{s['words']}**", 1)
        lines.append(
            f"- {ARM_LABEL[b]} / {ARM_LABEL[a]}: geometric mean {e2_ratio(s)}; t-test p {p_text(s['p_t'])} (Holm {p_text(s['p_t_holm'])}): "
            f"{words}"
        )
    lines += censoring_lines(ends, target)
    if ends["e2"]["vr-base"]["words"] == "faster":
        lines += ["", "VR − base is faster: the registered follow-up at 20 epochs is due."]
    return lines + [""]


def censoring_lines(ends, target):
    """How much of E2's VR − base rests on censoring (descriptive, not registered): the
    pairs in which neither arm reached the target count a ratio of exactly 1 (41 / 41)."""
    both = sum(
        b > p4.EPOCHS and v > p4.EPOCHS
        for b, v in zip(ends["epochs"]["base"], ends["epochs"]["vr"])
    )
    if not both:
        return []
    return [
        "",
        f"Descriptive, not registered: in {both} of {len(ends['epochs']['base'])} pairs neither "
        "base nor VR reached the target; each such pair counts a ratio of exactly 1 (41 / 41), "
        "as registered, which draws the mean and its CI toward 1. The target "
        f"({target:.2f} %) is the base's mean over its {len(p4.TUNE_SEEDS)} tuning seeds at "
        f"its chosen rate ({target + p4.TARGET_BELOW_PP:.2f} %) minus {p4.TARGET_BELOW_PP:g} pp; its {len(p4.FINAL_SEEDS)} final "
        f"runs averaged {ends['final_val']['base']:.2f} % validation accuracy.",
    ]


def gap_side(s):
    """E3's VR − base summary ``s`` in words: which gap its 95 % CI puts narrower, if any."""
    lo, hi = s["t_ci"]
    return "VR's gap narrower" if hi < 0 else "VR's gap wider" if lo > 0 else "no clear difference"


def gap_text(s, e1_words):
    """E3 for the README line: VR − base with its CI and side; a narrower gap beside an E1
    that is not "better" says it is not a benefit (PROTOCOL4.md section 5: read with E1)."""
    side = gap_side(s)
    if s["t_ci"][1] < 0 and e1_words != "better":
        side += ", without a test-accuracy gain (E1): not a benefit"
    return f"gap VR − base {s['mean']:+.2f} pp, {_ci(*s['t_ci'])} ({side})"


def e3_e4_lines(by_arm, ends):
    """Markdown lines of E3 (the gap, read with E1) and E4 (collapses)."""
    s, c = ends["e3"], ends["e4"]
    gaps = ", ".join(f"{ARM_LABEL[a]} {np.mean(column(by_arm, a, 'gap')):.2f} pp" for a in ARMS)
    lo, hi = s["t_ci"]
    side = gap_side(s)
    e1 = ends["e1"]["vr-base"]
    read = (
        f"; read with E1 (VR − base {e1['mean']:+.2f} pp, {_ci(*e1['t_ci'])}, Holm p "
        f"{p_text(e1['p_t_holm'])}, {e1['words']})"
        + (": a narrower gap with lower test accuracy is not a benefit" if e1["mean"] < 0 else "")
    )
    lines = [
        f"**E3, generalization gap** (full training split minus test accuracy; mean {gaps}): "
        f"VR − base {s['mean']:+.2f} pp, {_ci(lo, hi)}: {side}" + (read if hi < 0 else "") + ".",
        "",
        f"**E4, collapses** (final validation accuracy below {p4.COLLAPSE_BELOW:g} %): "
        + ", ".join(f"{ARM_LABEL[a]} {ends['collapses'][a]} of 24" for a in ARMS)
        + f"; VR vs base, exact paired test on the discordant seeds {c['discordant']} "
        f"(base only, VR only): p {p_text(c['p'])}.",
        "",
    ]
    return lines


def choice_lines(choice):
    """The registered tuning outcome in Markdown lines."""
    before, best, steps = choice["best_before_guard"], choice["best"], choice["guard_steps"]
    lines = [
        "Chosen rates (best mean validation accuracy, then the stability guard): "
        + ", ".join(
            f"{ARM_LABEL[a]} {best[a]:g}"
            + (f" (best {before[a]:g}, {steps[a]} step(s) down)" if steps[a] else "")
            for a in ARMS
        )
        + f". E2's target: {choice['target_val_acc']:.2f} %."
    ]
    if choice["cap_binding"]:
        lines.append(f"The edge cap binds for {', '.join(choice['cap_binding'])}.")
    if choice["repilot"]:
        lines.append("**A base tuning run collapsed at its chosen rate: the round stops.**")
    return lines + [""]


def window_line(tune, pair, grid):
    """Each arm's learning-rate window on the contiguous definition (descriptive, not
    registered: :func:`evidence_stats.contiguous_lr_window` over the 3-seed means the choice
    uses, ``protocol3.mean_val``: a non-finite run counts 0 %, a missing one leaves a gap)."""
    runs = (tune or {}).get("runs", {})
    parts = []
    for a in ARMS:
        means = [p3.mean_val(runs, pair, a, lr, p4.TUNE_SEEDS) for lr in grid]
        w = es.contiguous_lr_window(grid, [float("nan") if m is None else m for m in means])
        if w["count"]:
            parts.append(
                f"{ARM_LABEL[a]} {w['low']:g}–{w['high']:g} ({w['count']} rate(s), "
                f"×{2 ** w['log2_width']:.2f} wide)"
            )
    if not parts:
        return []
    return [
        "Learning-rate window within 1 pp of each arm's best mean, contiguous (the best rate "
        "and its neighbours until one falls more than 1 pp below; descriptive, not "
        "registered): " + "; ".join(parts) + ".",
        "",
    ]


def provenance_line(states):
    """Which library commit every run holds for, and how many came from a dirty tree."""
    prov = [r["provenance"] for s in states for r in (s or {}).get("runs", {}).values()]
    if not prov:
        return "No run yet."
    commits = sorted({p.get("git_commit", "?")[:7] for p in prov})
    dirty = sum(bool(p.get("dirty")) for p in prov)
    return (
        f"Every run so far holds for the frozen library commit "
        f"{', '.join(f'`{c}`' for c in commits)} ({len(prov)} runs, {dirty} from a dirty tree; "
        "each run's start and end time and provenance are in the JSON)."
    )


def reference_lines(ref, by_arm):
    """The descriptive batch-256 reference (8 seeds), beside the base at 8192 once final."""
    runs = [(ref or {}).get("runs", {}).get(p4.reference_key(s)) for s in p4.REFERENCE_SEEDS]
    runs = [r for r in runs if r]
    head = (
        f"**Reference** (descriptive, no contrast): the base at batch {p4.REFERENCE['batch']}, "
        f"rate {p4.REFERENCE['lr']:g}"
    )
    if len(runs) < len(p4.REFERENCE_SEEDS):
        return [f"{head}: {len(runs)} of {len(p4.REFERENCE_SEEDS)} runs.", ""]
    acc = [r["final"]["test_acc"] for r in runs]
    gap = [r["final"]["gap"] for r in runs]
    text = (
        f"{head}: test accuracy {np.mean(acc):.2f} ± {np.std(acc, ddof=1):.2f} % (8 seeds), "
        f"gap {np.mean(gap):.2f} pp"
    )
    if by_arm:
        base = np.mean(column(by_arm, "base", "test_acc"))
        text += f"; the base at {p4.BATCH} minus it: {base - np.mean(acc):+.2f} pp"
    return [text + ".", ""]


def plots(tune, pair, st, ends, images_dir, images_rel):
    """The pair's plots (tuning always; the final distributions, epochs to the target and
    the gap once complete) as Markdown image lines."""
    out = []

    def add(name, alt):
        out.extend([f"![{alt}]({images_rel}/{name})", ""])
        return os.path.join(images_dir, name)

    label = f"Round 4 tuning, {PAIR_LABEL[pair]}, batch {p4.BATCH}"
    title = label if st["choice"] else f"{label} (in progress)"
    path = add(f"round4_tuning_{pair}.png", "validation accuracy vs learning rate per arm")
    round3.plot_tuning(tune, pair, st["grid"], path, arms=ARMS, title=title)
    if not st["complete"]:
        return out
    by_arm = st["by_arm"]
    pf = f"Round 4 final, {PAIR_LABEL[pair]}, 24 seeds per arm"
    path = add(f"round4_final_{pair}.png", "final test accuracy per arm")
    round3.plot_final(by_arm, path, pair, title=pf)
    path = add(f"round4_gap_{pair}.png", "generalization gap per arm")
    round3.plot_final(by_arm, path, pair, "gap", pf, "train (full split) − test accuracy, pp")
    ep = {
        a: {s: {"final": {"e": e}} for s, e in zip(p4.FINAL_SEEDS, ends["epochs"][a])} for a in ARMS
    }
    path = add(f"round4_epochs_{pair}.png", "epochs to the target per arm")
    ylabel = "epochs to the E2 target\n(41 = never; bar: median, 41 if not reached)"

    def median_or_never(e):
        m = median_epochs(e)
        return p4.EPOCHS + 1 if m is None else m

    round3.plot_final(ep, path, pair, "e", pf, ylabel, center=median_or_never)
    return out


def pair_lines(tune, final, pair, images_dir, images_rel):
    """The Markdown lines of one pair's round-4 results."""
    st = status(tune, final, pair)
    lines = [f"#### {PAIR_LABEL[pair]} pair: {st['text']}", ""]
    if not round3.runs_of(tune, pair):
        return lines + ["Not yet run.", ""]
    lines += [
        "Tuning, mean final validation accuracy % per arm and peak rate (seeds finished; "
        f"lowest–highest run; coll. = below {p4.COLLAPSE_BELOW:g} %):",
        "",
        *round3.tuning_table(tune, pair, st["grid"], arms=ARMS, spread=True),
        "",
    ]
    ends = None
    if st["choice"]:
        lines += choice_lines(st["choice"]) + window_line(tune, pair, st["grid"])
    if st["complete"]:
        ends = endpoints(st["by_arm"], st["choice"]["target_val_acc"])
        lines += e1_lines(st["by_arm"], ends)
        lines += e2_lines(ends, st["choice"]["target_val_acc"])
        lines += e3_e4_lines(st["by_arm"], ends)
    else:
        lines += ["No endpoint yet: they are computed once the pair's 72 final runs are in.", ""]
    return lines + plots(tune, pair, st, ends, images_dir, images_rel)


def section(results_dir, images_dir, images_rel):
    """The round-4 subsection (Markdown string); writes its plots."""
    tune, final, ref = (round3.load(results_dir, p) for p in ("tune", "final", "reference"))
    reg = (tune or {}).get("registration", {})
    lines = [
        HEADING,
        "",
        "Protocol, registered before the first run: "
        "[studies/evidence/PROTOCOL4.md](../studies/evidence/PROTOCOL4.md)"
        + (
            f" (registered in commit `{reg['last_protocol_commit'][:10]}`; its section 7 "
            "holds the dated clarifications after it)"
            if reg
            else ""
        )
        + f". Fashion-MNIST, the BatchNorm CNN, batch {p4.BATCH} ({p4.K} groups of "
        f"{p4.GROUP_SIZE}), {p4.EPOCHS} epochs; arms base, VR and scalar-VR (VR's step size "
        "per variable, no per-element weighting), each tuned on a ×2^(1/4) grid with 3 seeds "
        "on validation only, then 24 fresh seed pairs on the test set. Runner "
        "`python3 studies/evidence/round4.py`; endpoints `studies/evidence/stats4.py`.",
        "",
        provenance_line([tune, final, ref]),
        "",
    ]
    os.makedirs(images_dir, exist_ok=True)
    by_arm = None
    for pair in p4.PAIRS:
        if pair == "lars" and not round3.runs_of(tune, pair):
            lines += ["#### LARS pair: not yet run (after the Momentum pair's final phase).", ""]
            continue
        lines += pair_lines(tune, final, pair, images_dir, images_rel)
        if pair == p4.REFERENCE["pair"]:
            st = status(tune, final, pair)
            by_arm = st["by_arm"] if st["complete"] else None
            lines += reference_lines(ref, by_arm)
    return "\n".join(lines)


#: A round-4 readout in a user's words, for the optimizer ``{opt}``.
IN_WORDS = {
    "helps": "yes with {opt}, beyond its step size",
    "helps only through its step size": "with {opt} only as a step size",
    "no benefit": "no benefit with {opt}: a tuned {opt} did as well",
    "costs accuracy": "it cost accuracy with {opt}",
    "inconclusive": "not shown with {opt}",
}


def _contrast(name, s):
    return f"{name} {s['mean']:+.2f} pp, {_ci(*s['t_ci'])}, Holm p {p_text(s['p_t_holm'])}"


def user_words(readout, e1, opt, collapses=None, deltas=None, name_readout=True):
    """A readout in a user's words with E1's summaries ``e1`` (``{"vr-base": s,
    "vr-scalar_vr": s}``, each with mean, CI, Holm's p), e.g. "not shown with Momentum
    (inconclusive: VR − base +6.08 pp, 95 % CI [...], Holm p 0.0953)". A difference the CI
    detects never reads "did as well": "no benefit" with the CI below 0 reads "slightly
    worse", above 0 "slightly higher, not significant after Holm". "helps" and "helps only
    through its step size" add VR − scalar-VR, the contrast they rest on. Where the base
    or VR collapsed (``collapses``: ``{arm: count}``), the VR − base ``deltas``' median and
    the seeds favouring VR stand beside the mean, and a median of the other sign says the
    mean comes from the collapsed seeds. ``name_readout`` False leaves "inconclusive: " out
    and VR − scalar-VR to a line that gives them already."""
    s = e1["vr-base"]
    lo, hi = s["t_ci"]
    words = IN_WORDS[readout].format(opt=opt)
    if readout == "no benefit" and hi < 0:
        words = f"no benefit with {opt}: VR was slightly worse than a tuned {opt}, within ±0.5 pp"
    elif readout == "no benefit" and lo > 0:
        words = (
            f"no benefit with {opt} beyond ±0.5 pp: VR was slightly higher than a tuned {opt}, "
            "not significant after Holm"
        )
    detail = _contrast("VR − base", s)
    gone = {a: n for a, n in (collapses or {}).items() if n and a in ("base", "vr")}
    if gone and deltas is not None:
        med = float(np.median(deltas))
        detail += f"; {round3.seeds_text(deltas)}; collapsed: " + ", ".join(
            f"{ARM_LABEL[a]} on {n} of {len(deltas)} seeds" for a, n in gone.items()
        )
        if med * s["mean"] < 0:
            detail += "; the median has the other sign: the mean comes from the collapsed seeds"
    if name_readout and readout.startswith("helps"):
        detail += "; " + _contrast("VR − scalar-VR", e1["vr-scalar_vr"])
    tag = "inconclusive: " if name_readout and readout == "inconclusive" else ""
    return f"{words} ({tag}{detail})"


def in_words(results_dir, pair="momentum", name_readout=True):
    """A complete pair's readout in a user's words (:func:`user_words`), or None."""
    tune, final = round3.load(results_dir, "tune"), round3.load(results_dir, "final")
    st = status(tune, final, pair)
    if not st["complete"]:
        return None
    ends = endpoints(st["by_arm"], st["choice"]["target_val_acc"])
    by_arm = st["by_arm"]
    deltas = np.subtract(column(by_arm, "vr", "test_acc"), column(by_arm, "base", "test_acc"))
    opt = PAIR_LABEL[pair]
    return user_words(ends["readout"], ends["e1"], opt, ends["collapses"], deltas, name_readout)


def headline(results_dir, pair="momentum"):
    """One README line: the pair's readout with E1-E4 in brief, or its progress."""
    tune, final = round3.load(results_dir, "tune"), round3.load(results_dir, "final")
    st = status(tune, final, pair)
    setting = (
        f"Round 4 ({PAIR_LABEL[pair]}, batch {p4.BATCH} where large batch costs the base accuracy"
    )
    if not st["complete"]:
        verb = "stopped" if st["choice"] and st["choice"]["repilot"] else "is running"
        return f"{setting}; 24 pairs) {verb}: {st['text']}; no verdict yet."
    ends = endpoints(st["by_arm"], st["choice"]["target_val_acc"])
    e2, e3, vs = ends["e2"]["vr-base"], ends["e3"], ends["e1"]["vr-scalar_vr"]
    return (
        f"{setting}, 24 pairs): **{ends['readout']}**: {in_words(results_dir, pair, False)}; "
        f"{_contrast('VR − scalar-VR', vs)} ({round3._word(vs)}); speed-up (base / VR epochs to "
        f"the target) {e2_summary(e2)} ({e2_words_text(e2)}); "
        f"{gap_text(e3, ends['e1']['vr-base']['words'])}; collapses "
        + ", ".join(f"{ARM_LABEL[a]} {ends['collapses'][a]}" for a in ARMS)
        + "."
    )
