"""The evidence verdict in a user's words: at most five lines for the README and the head of
the evidence block of docs/results.md, every number computed from the results JSON."""

import os

from report import round2, round3, round4

ANCHOR = "evidence-does-vrgd-help-fashion-mnist-pre-registered"
HEADING = "## Evidence: does VRGD help? (Fashion-MNIST, pre-registered)"


def round2_line(round2_dir, pair="momentum"):
    """Round 2 in one line (its result and why it cannot be credited to the GSNR), or []."""
    tune, final = (round2._load(round2_dir, p) for p in ("tune", "final"))
    vr = round2._runs(final, pair=pair, batch=round2.LARGE, side="vr")
    s = round2._paired(round2._runs(final, pair=pair, batch=round2.LARGE, side="base"), vr)
    if not s:
        return []
    nr = round2.norm_ratio_range(vr)
    rates = (tune or {}).get("best", {}).get(f"{pair}/b{round2.LARGE}", {})
    why = ""
    if nr and rates:
        why = (
            f"; VR at {rates['vr']:g} stepped like the base at {rates['vr'] * nr[0]:.3f}–"
            f"{rates['vr'] * nr[1]:.3f} (its update norm ratios {nr[0]:.2f}–{nr[1]:.2f}; "
            "PROTOCOL.md's 0.075–0.086 was a slip in that product), between the base's ×2 "
            "grid points, so that gain cannot be credited to the GSNR"
        )
    return [
        f"- Round 2 (Momentum, {s['n']} pairs): VR − base {round2._delta_text(s)}, "
        f"{s['verdict']}{why}."
    ]


#: A registered readout in a user's words, for the optimizer ``{opt}``.
IN_WORDS = {
    "the GSNR weighting helps": "yes with {opt}, beyond its step size",
    "VRGD helps only through its step size": (
        "with {opt} only as a step size (tuning {opt}'s rate does the same)"
    ),
    "no benefit at a finely tuned base": "not with {opt} (a finely tuned {opt} did as well)",
    "inconclusive": "not shown with {opt} (inconclusive)",
}


def in_words(readout, opt, vr_base, base_collapses=0):
    """A pair's registered readout in a user's words. A detectable deficit is never read
    as "did as well": an "equivalent" VR − base whose CI lies below 0 reads "slightly worse"
    with its CI; an inconclusive readout names the base's collapses when there were any,
    with the mean, the CI and Holm's p."""
    lo, hi = vr_base["t_ci"]
    if readout == "no benefit at a finely tuned base" and hi < 0:
        return (
            f"not with {opt}: VR-{opt} was slightly worse than a finely tuned {opt} "
            f"({vr_base['mean']:+.2f} pp, 95 % CI [{lo:+.2f}, {hi:+.2f}])"
        )
    if readout == "inconclusive" and base_collapses:
        return (
            f"not shown with {opt} (inconclusive: VR − base {vr_base['mean']:+.2f} pp, 95 % CI "
            f"[{lo:+.2f}, {hi:+.2f}], Holm p {vr_base['p_t_holm']:.2g}; the mean gain comes "
            f"from the base's {base_collapses} collapsed seeds, and the step size alone gives it)"
        )
    return IN_WORDS[readout].format(opt=opt)


def lead(round3_dir, pairs, round4_dir=None):
    """The bold first line: round 4's readout once its Momentum pair is complete, then round
    3's registered readout of each finished pair of ``pairs``, in a user's words."""
    tune, final = round3.load(round3_dir, "tune"), round3.load(round3_dir, "final")
    parts, complete = [], False
    for p in pairs:
        opt = round3.PAIR_LABEL[p]
        _, _, _, by_arm, done = round3._status(tune, final, p)
        if not done:
            parts.append(f"{opt} still running")
            continue
        complete = True
        r = round3.registered_readout(by_arm)
        collapses = round3.final_collapses(by_arm, "base")
        parts.append(in_words(r["readout"], opt, r["primary"]["vr-base"], collapses))
    if not complete:
        return "**Does it help? Not shown yet: round 2 was inconclusive, round 3 is running.**"
    four = round4.in_words(round4_dir) if round4_dir else None
    four = (
        f"Round 4 (batch {round4.p4.BATCH}, where large batch costs the base accuracy): {four}. "
        if four
        else ""
    )
    return (
        f"**Does it help? {four}Round 3's registered readouts (Fashion-MNIST, batch 4096): "
        f"{'; '.join(parts)}.**"
    )


def first_screen(round3_dir, link, round4_dir=None):
    """One line for the README's first screen: each finished pair's readout in a user's
    words (round 4's first once complete), and the link."""
    text = lead(round3_dir, ["momentum", "lamb"], round4_dir).strip("*")
    text = text.replace("Does it help? ", "**Does VRGD help?** ")
    return f"{text} Every arm, CI and plot: {link}."


def lines(round2_dir, round3_dir, link, round4_dir=None, readme=True):
    """The verdict: a bold lead (:func:`lead`), round 2's line, one line per round-3 pair,
    round 4's Momentum line once it has runs, and ``link``. For the README (``readme``, at
    most five lines) round 2's line gives way to round 4's."""
    tune = round3.load(round3_dir, "tune")
    pairs = ["momentum"] + (["lamb"] if round3.runs_of(tune, "lamb") else [])
    has4 = bool(round4_dir) and os.path.exists(os.path.join(round4_dir, "tune.json"))
    out = [lead(round3_dir, pairs, round4_dir)]
    out += [] if readme and has4 else round2_line(round2_dir)
    if os.path.exists(os.path.join(round3_dir, "tune.json")):
        out += ["- " + round3.headline(round3_dir, p) for p in pairs]
    out += ["- " + round4.headline(round4_dir)] if has4 else []
    out.append(f"- Every arm, CI and plot: {link}.")
    if readme and len(out) > 5:
        raise ValueError(f"the verdict has {len(out)} lines; at most 5: {out}")
    return out
