"""The evidence verdict in a user's words: at most five lines for the README and the head of
the evidence block of docs/results.md, every number computed from the results JSON."""

import os

from report import round2, round3

ANCHOR = "evidence-does-vrgd-help-fashion-mnist-pre-registered"
HEADING = "## Evidence: does VRGD help? (Fashion-MNIST, pre-registered)"


def round2_lines(results_dir, pair="momentum"):
    """Round 2's result and why it cannot be credited to the GSNR (two lines), or []."""
    tune, final = (round2._load(results_dir, p) for p in ("tune", "final"))
    base = round2._runs(final, pair=pair, batch=round2.LARGE, side="base")
    vr = round2._runs(final, pair=pair, batch=round2.LARGE, side="vr")
    s = round2._paired(base, vr)
    if not s:
        return []
    rates = (tune or {}).get("best", {}).get(f"{pair}/b{round2.LARGE}", {})
    out = [
        f"- Round 2 (batch {round2.LARGE}, Momentum, each side's rate tuned on a ×2 grid, "
        f"{s['n']} seed pairs): VR − base test accuracy {round2._delta_text(s)}: "
        f"{s['verdict']}."
    ]
    nr = round2.norm_ratio_range(vr)
    if nr and rates:
        lo, hi = rates["vr"] * nr[0], rates["vr"] * nr[1]
        out.append(
            f"- That gain cannot be credited to the GSNR weighting: VR's updates were "
            f"{nr[0]:.2f}–{nr[1]:.2f} of the plain gradient step, so at its rate "
            f"{rates['vr']:g} its steps were as long as the base's at {lo:.3f}–{hi:.3f}, a rate the base's "
            f"grid ({rates['base']:g}, {2 * rates['base']:g}) never tried."
        )
    return out


def lines(round2_dir, round3_dir, link):
    """The verdict (at most five lines): a bold lead (round 3's registered readout once its
    Momentum pair is complete), round 2's two lines, round 3's line, and ``link``."""
    done = round3.readout_if_complete(round3_dir)
    lead = (
        f"**Does it help? Round 3's registered readout: {done}.**"
        if done
        else "**Does it help? Not shown yet: round 2 was inconclusive, round 3 is running.**"
    )
    out = [lead] + round2_lines(round2_dir)
    if os.path.exists(os.path.join(round3_dir, "tune.json")):
        out.append("- " + round3.headline(round3_dir))
    out.append(f"- Every arm, CI and plot: {link}.")
    return out[:5]
