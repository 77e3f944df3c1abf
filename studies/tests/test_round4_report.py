"""Round 4's section of docs/results.md (studies/report/round4.py) on made-up runs: the
honest partial states (tuning, then final in progress: no test accuracy shown), the
registered choice recomputed from the runs, and the endpoints of a complete pair checked
against hand-computed values."""

import json
import os

import numpy as np
import protocol4 as p4
import tensorflow as tf
from report import round2, round3, round4, verdict

PROV = {"git_commit": "2329a386d0e7", "dirty": False}


def tune_state(upto=None):
    """Every arm peaks at 6.4 (90 %), one point lower per grid step away; ``upto`` runs."""
    runs = {}
    for s in p4.TUNE_SEEDS:
        for i, lr in enumerate(p4.tune_grid({}, "momentum")[0]):
            for a in p4.ARMS:
                runs[p4.run_key("momentum", a, lr, s)] = {
                    "pair": "momentum",
                    "arm": a,
                    "peak_lr": lr,
                    "seed": s,
                    "final": {"val_acc": 90.0 - abs(i - 4)},
                    "provenance": PROV,
                }
    keys = list(runs)[: upto or len(runs)]
    return {"runs": {k: runs[k] for k in keys}, "registration": {"last_protocol_commit": "2329a3"}}


def final_run(arm, seed, test, gap, reach):
    """A final run: validation 80 % before epoch ``reach``, 90 % from it."""
    curve = [{"epoch": e, "val_acc": 80.0 if e < reach else 90.0} for e in range(1, 41)]
    final = {"val_acc": 90.0, "test_acc": test, "gap": gap}
    return {
        "pair": "momentum",
        "arm": arm,
        "peak_lr": 6.4,
        "seed": seed,
        "final": final,
        "curve": curve,
        "provenance": PROV,
    }


def final_state(n=24):
    """Base 90 + seed/100; VR +0.3 ± 0.1; scalar-VR 0.3 ± 0.1 below VR. The base reaches
    the target (89.5 %) at epoch 20, VR at 10, scalar-VR at 20; gaps 2.0, 1.5, 2.0 pp."""
    runs = {}
    for s in range(n):
        base = 90.0 + s / 100
        vr = base + (0.4 if s % 2 else 0.2)
        spec = {"base": (base, 2.0, 20), "vr": (vr, 1.5, 10), "scalar_vr": (vr - 0.3, 2.0, 20)}
        for a in p4.ARMS:
            runs[p4.run_key("momentum", a, 6.4, s)] = final_run(a, s, *spec[a])
    return {"runs": runs}


class Round4ReportTest(tf.test.TestCase):
    def write(self, **phases):
        d = self.get_temp_dir()
        for name in ("tune", "final", "reference"):
            path = os.path.join(d, f"{name}.json")
            if os.path.exists(path):
                os.remove(path)
            if name in phases:
                with open(path, "w") as f:
                    json.dump(phases[name], f)
        return d

    def section(self, d):
        images = os.path.join(d, "img")
        return round4.section(d, images, "img"), images

    def test_tuning_in_progress(self):
        d = self.write(tune=tune_state(upto=47))
        text, images = self.section(d)
        self.assertIn("#### Momentum pair: tuning in progress: 47 of 81 runs", text)
        self.assertIn("No endpoint yet", text)
        self.assertNotIn("Chosen rates", text)
        self.assertIn("`2329a38` (47 runs, 0 from a dirty tree", text)
        self.assertTrue(os.path.exists(os.path.join(images, "round4_tuning_momentum.png")))
        self.assertIn("no verdict yet", round4.headline(d))
        self.assertIsNone(round4.in_words(d))

    def test_tuning_table_gives_each_rates_lowest_and_highest_run(self):
        # The stability guard reads single runs, so the table shows each rate's range
        # beside the mean (the evidence review's section 5.5).
        tune = tune_state(upto=3 * 27)
        grid = p4.tune_grid({}, "momentum")[0]
        for s, v in zip(p4.TUNE_SEEDS, (86.2, 91.3, 10.0)):
            tune["runs"][p4.run_key("momentum", "base", grid[0], s)]["final"]["val_acc"] = v
        text, _ = self.section(self.write(tune=tune))
        self.assertIn("| base | 62.50 (3; 10.00–91.30; 1 coll.) | 87.00 (3; 87.00–87.00) |", text)
        self.assertIn("(seeds finished; lowest–highest run; coll. = below 20 %)", text)

    def test_final_in_progress_shows_no_test_accuracy(self):
        d = self.write(tune=tune_state(), final=final_state(n=5))
        text, _ = self.section(d)
        self.assertIn("tuning done (81 runs); final phase: 15 of 72 runs", text)
        self.assertIn("Chosen rates (best mean validation accuracy, then the stability", text)
        self.assertIn("base 6.4, VR 6.4, scalar-VR 6.4. E2's target: 89.50 %.", text)
        # 5.38 and 7.61 are exactly 1 pp below the best (inside), 4.53 and 9.05 2 pp.
        self.assertIn("registered): base 5.38174–7.61093 (3 rate(s), ×1.41 wide); VR", text)
        # A non-finite run counts 0 % (as in the choice): VR's 6.4 mean falls to 60 %, the
        # best is 5.38 (tied with 7.61 at 89 %: the lower), 4.53's 88 % is within 1 pp and
        # 6.4 ends the window above.
        tune = tune_state()
        tune["runs"][p4.run_key("momentum", "vr", 6.4, p4.TUNE_SEEDS[0])]["final"]["val_acc"] = None
        line = round4.window_line(tune, "momentum", p4.tune_grid({}, "momentum")[0])[0]
        self.assertIn("; VR 4.52548–5.38174 (2 rate(s), ×1.19 wide);", line)
        self.assertNotIn("E1 (primary)", text)
        self.assertNotIn("test accuracy 9", text)

    def test_complete_pair_endpoints_by_hand(self):
        d = self.write(tune=tune_state(), final=final_state())
        st = round4.status(
            round4.round3.load(d, "tune"), round4.round3.load(d, "final"), "momentum"
        )
        self.assertTrue(st["complete"])
        ends = round4.endpoints(st["by_arm"], st["choice"]["target_val_acc"])
        e1 = ends["e1"]
        self.assertAllClose(e1["vr-base"]["mean"], 0.3)
        self.assertAllClose(e1["vr-scalar_vr"]["mean"], 0.3)
        self.assertEqual(e1["vr-base"]["words"], "better")
        self.assertEqual(ends["readout"], "helps")
        self.assertEqual(ends["epochs"]["base"], [20] * 24)
        self.assertEqual(ends["epochs"]["vr"], [10] * 24)
        self.assertAllClose(ends["e2"]["vr-base"]["ratio"], 2.0)
        self.assertEqual(ends["e2"]["vr-base"]["words"], "faster")
        self.assertAllClose(ends["e3"]["mean"], -0.5)
        self.assertEqual(ends["collapses"], {"base": 0, "vr": 0, "scalar_vr": 0})
        self.assertEqual(ends["e4"]["p"], 1.0)
        text, images = self.section(d)
        self.assertIn("**Registered readout: helps.**", text)
        self.assertIn("base / VR: geometric mean 2.000x", text)
        self.assertIn("the registered follow-up at 20 epochs is due", text)
        self.assertIn("VR − base -0.50 pp", text)
        for name in ("final", "gap", "epochs"):
            self.assertTrue(os.path.exists(os.path.join(images, f"round4_{name}_momentum.png")))
        base = np.mean([90.0 + s / 100 for s in range(24)])
        self.assertIn(f"- base: {base:.2f} ±", text)
        line = round4.headline(d)
        self.assertIn("**helps**", line)
        self.assertIn("[-0.50, -0.50] (VR's gap narrower); collapses", line)
        self.assertIn("yes with Momentum, beyond its step size (VR − base +0.30 pp", line)
        self.assertIn(
            "speed-up (base / VR epochs to the target) 2.000x, 95 % CI [2.000, 2.000], Holm p 0 "
            "(faster)",
            line,
        )
        # Every contrast of the line carries its CI: VR − scalar-VR +0.30 ± 0.10 (sd).
        s = ends["e1"]["vr-scalar_vr"]
        self.assertIn(
            f"VR − scalar-VR +0.30 pp, 95 % CI [{s['t_ci'][0]:+.2f}, {s['t_ci'][1]:+.2f}], Holm p "
            f"{s['p_t_holm']:.2g} (better)",
            line,
        )

    def test_reference_beside_the_base(self):
        runs = {
            p4.reference_key(s): {
                "final": {"test_acc": 92.0 + (s % 2), "gap": 5.0},
                "provenance": PROV,
            }
            for s in p4.REFERENCE_SEEDS
        }
        d = self.write(tune=tune_state(), final=final_state(), reference={"runs": runs})
        text, _ = self.section(d)
        base = np.mean([90.0 + s / 100 for s in range(24)])
        self.assertIn("test accuracy 92.50 ± 0.53 % (8 seeds), gap 5.00 pp", text)
        self.assertIn(f"the base at 8192 minus it: {base - 92.5:+.2f} pp", text)
        for r in runs.values():
            r["final"]["test_acc"] = 89.5  # the base above the reference: the sign says so
        d = self.write(tune=tune_state(), final=final_state(), reference={"runs": runs})
        self.assertIn(f"the base at 8192 minus it: +{base - 89.5:.2f} pp", self.section(d)[0])

    def test_registration_and_the_repilot_stop(self):
        tune = tune_state()
        text, _ = self.section(self.write(tune=tune))
        self.assertIn("(registered in commit `2329a3`; its section 7 holds the dated", text)
        for lr in p4.tune_grid({}, "momentum")[0]:  # the guard steps down to the lowest rate,
            key = p4.run_key("momentum", "base", lr, 1000)  # where a base run collapsed
            tune["runs"][key]["final"]["val_acc"] = 10.0
        d = self.write(tune=tune)
        st = round4.status(round4.round3.load(d, "tune"), None, "momentum")
        self.assertTrue(st["choice"]["repilot"])
        self.assertIn("stopped after tuning (81 runs)", st["text"])
        self.assertIn("24 pairs) stopped: stopped after tuning", round4.headline(d))

    def test_user_words_never_read_a_detected_difference_as_did_as_well(self):
        def e1(lo, hi, p=0.2):
            s = {"mean": (lo + hi) / 2, "t_ci": [lo, hi], "p_t_holm": p}
            return {"vr-base": s, "vr-scalar_vr": dict(s, mean=0.1)}

        above = round4.user_words("no benefit", e1(0.01, 0.39), "Momentum")
        self.assertStartsWith(
            above, "no benefit with Momentum beyond ±0.5 pp: VR was slightly higher"
        )
        self.assertIn(
            "not significant after Holm (VR − base +0.20 pp, 95 % CI [+0.01, +0.39], Holm p 0.2)",
            above,
        )
        below = round4.user_words("no benefit", e1(-0.39, -0.01), "Momentum")
        self.assertIn("VR was slightly worse than a tuned Momentum, within ±0.5 pp (VR", below)
        across = round4.user_words("no benefit", e1(-0.2, 0.2), "Momentum")
        self.assertEqual(
            across,
            "no benefit with Momentum: a tuned Momentum did as well (VR − base +0.00 pp, 95 % "
            "CI [-0.20, +0.20], Holm p 0.2)",
        )
        # "helps" rests on VR − scalar-VR too: it is given.
        helps = round4.user_words("helps only through its step size", e1(0.1, 0.5), "LARS")
        self.assertEqual(
            helps,
            "with LARS only as a step size (VR − base +0.30 pp, 95 % CI [+0.10, +0.50], Holm p "
            "0.2; VR − scalar-VR +0.10 pp, 95 % CI [+0.10, +0.50], Holm p 0.2)",
        )

    def test_user_words_inconclusive_gives_holm_p_and_the_collapses(self):
        """An inconclusive readout reads once (no "(inconclusive) (…)"), with Holm's p on the
        line of a CI that excludes 0; where the base (or VR) collapsed, the median and the
        seeds favouring VR stand beside the mean (issue 37's rule for a mean carried by
        collapses), and a median of the other sign says where the mean comes from."""
        s = {"mean": 6.08, "t_ci": [0.2, 12.0], "p_t_holm": 0.0953}
        e1 = {"vr-base": s, "vr-scalar_vr": s}
        d = [70.0, 75.0] + [-0.5] * 15 + [0.3] * 7  # 2 base collapses, 9 of 24 favour VR
        gone = {"base": 2, "vr": 0, "scalar_vr": 3}
        words = round4.user_words("inconclusive", e1, "Momentum", collapses=gone, deltas=d)
        self.assertEqual(
            words,
            "not shown with Momentum (inconclusive: VR − base +6.08 pp, 95 % CI [+0.20, "
            "+12.00], Holm p 0.0953; median -0.50 pp, 9 of 24 seeds favour VR; collapsed: base "
            "on 2 of 24 seeds; the median has the other sign: the mean comes from the collapsed "
            "seeds)",
        )
        plain = round4.user_words("inconclusive", e1, "Momentum")
        self.assertNotIn("(inconclusive) (", plain)
        self.assertNotIn("median", plain)
        # VR's collapses carry a negative mean the same way.
        s = {"mean": -13.2, "t_ci": [-26.0, -0.5], "p_t_holm": 0.085}
        d = [-80.0] * 4 + [0.2] * 20
        words = round4.user_words(
            "inconclusive", {"vr-base": s}, "Momentum", {"base": 0, "vr": 4}, d
        )
        self.assertIn("median +0.20 pp, 20 of 24 seeds favour VR; collapsed: VR on 4 of 24", words)
        self.assertIn("the mean comes from the collapsed seeds)", words)

    def test_headline_and_lead_of_an_inconclusive_pair_with_base_collapses(self):
        """The README's round-4 line and lead, whole, from a complete made-up final phase:
        VR − base inconclusive, carried by 2 collapsed base seeds (validation 10 %); the
        speed-up's Holm p; "no speed-up" with a detected side (VR 1.1x sooner where both
        reach the target); VR − scalar-VR's CI."""
        final = final_state()
        for s in (0, 1):  # the base collapses on seeds 0 and 1: test 10 %, never the target
            run = final["runs"][p4.run_key("momentum", "base", 6.4, s)]
            run["final"].update(val_acc=10.0, test_acc=10.0)
            run["curve"] = [dict(c, val_acc=10.0) for c in run["curve"]]
            vr = final["runs"][p4.run_key("momentum", "vr", 6.4, s)]  # VR too late there
            vr["curve"] = [dict(c, val_acc=80.0) for c in vr["curve"]]
        for s in range(2, 24):  # the rest reach the target at epoch 11 (VR at 10: 1.1x)
            run = final["runs"][p4.run_key("momentum", "base", 6.4, s)]
            run["final"]["test_acc"] += 0.5  # VR − base -0.3 or -0.1 pp there: median -0.1
            run["curve"] = [
                dict(c, val_acc=80.0 if c["epoch"] < 11 else 90.0) for c in run["curve"]
            ]
        d = self.write(tune=tune_state(), final=final)
        line = round4.headline(d)
        st = round4.status(
            round4.round3.load(d, "tune"), round4.round3.load(d, "final"), "momentum"
        )
        ends = round4.endpoints(st["by_arm"], st["choice"]["target_val_acc"])
        vb, e2 = ends["e1"]["vr-base"], ends["e2"]["vr-base"]
        self.assertEqual(vb["words"], "inconclusive")
        self.assertEqual(e2["words"], "no speed-up")
        lo, hi = vb["t_ci"]
        self.assertStartsWith(
            line,
            "Round 4 (Momentum, batch 8192 where large batch costs the base accuracy, 24 pairs): "
            f"**inconclusive**: not shown with Momentum (VR − base {vb['mean']:+.2f} pp, 95 % CI "
            f"[{lo:+.2f}, {hi:+.2f}], Holm p {round4.p_text(vb['p_t_holm'])}; median -0.10 pp, "
            "2 of 24 seeds favour VR; collapsed: base on 2 of 24 seeds; the median has the other "
            "sign: the mean comes from the collapsed seeds); VR − scalar-VR +0.30 pp",
        )
        self.assertIn(
            f"speed-up (base / VR epochs to the target) {e2['ratio']:.3f}x, 95 % CI", line
        )
        self.assertIn(
            f"Holm p {round4.p_text(e2['p_t_holm'])} (no speed-up, but VR detectably sooner, by less than 1.25x);",
            line,
        )
        self.assertIn("collapses base 2, VR 0, scalar-VR 0.", line)
        # Gap -0.5 pp on every seed, with E1 inconclusive: narrower is not a benefit.
        self.assertIn(
            "gap VR − base -0.50 pp, 95 % CI [-0.50, -0.50] (VR's gap narrower, without a "
            "test-accuracy gain (E1): not a benefit); collapses",
            line,
        )
        lead = verdict.lead(round3.RESULTS, ["momentum", "lamb"], d)
        self.assertIn("accuracy): not shown with Momentum (inconclusive: VR − base", lead)
        text, _ = self.section(d)
        self.assertIn(
            f"(Holm {round4.p_text(e2['p_t_holm'])}): **no speed-up**, but VR detectably sooner, by less than 1.25x\n",
            text,
        )

    def test_an_equivalent_contrast_off_zero_says_its_side(self):
        s = {"words": "equivalent", "t_ci": [-0.4, -0.1]}
        self.assertEqual(round4.bold_word(s), "**equivalent**, but slightly lower: CI below 0")
        self.assertEqual(round4.bold_word(dict(s, t_ci=[-0.1, 0.2])), "**equivalent**")
        self.assertEqual(round4.bold_word(dict(s, words="worse")), "**worse**")

    def test_p_text_never_rounds_across_the_threshold(self):
        self.assertEqual(round4.p_text(0.04996), "0.04996")
        self.assertEqual(round4.p_text(0.0953), "0.0953")
        self.assertEqual(round4.p_text(0.05004), "0.05")  # above it, "0.05" is honest
        self.assertEqual(round4.p_text(float("nan")), "nan")

    def test_e2_median_is_not_reached_when_half_never_reach_the_target(self):
        self.assertEqual(round4.median_epochs([10] * 13 + [41] * 11), 10.0)
        self.assertIsNone(round4.median_epochs([30] * 12 + [41] * 12))  # (30 + 41) / 2: not one
        final = final_state()
        for s in range(12):
            run = final["runs"][p4.run_key("momentum", "vr", 6.4, s)]
            run["curve"] = [dict(c, val_acc=80.0) for c in run["curve"]]
        text, _ = self.section(self.write(tune=tune_state(), final=final))
        self.assertIn("- VR: median not reached (half or more never) (range 10-41), 12 of 24", text)

    def test_inconclusive_e1_gives_its_power_and_e2_its_censored_pairs(self):
        """Descriptive lines of a complete pair, by hand: VR − base ±2 pp alternating (SD
        2·sqrt(24/23) = 2.043 pp, 3.4 times the planning 0.6 pp; a ±0.5 pp half width needs
        the smallest n with t_{0.975,n-1}·2.043/sqrt(n) <= 0.5: 67); VR − scalar-VR 0.3 pp
        constant (SD 0). Base and VR never reach the target on seeds 0-3: 4 of 24 pairs
        count a ratio of exactly 1."""
        final = final_state()
        for s in range(24):
            base = final["runs"][p4.run_key("momentum", "base", 6.4, s)]["final"]["test_acc"]
            vr = base + (2.0 if s % 2 else -2.0)
            final["runs"][p4.run_key("momentum", "vr", 6.4, s)]["final"]["test_acc"] = vr
            final["runs"][p4.run_key("momentum", "scalar_vr", 6.4, s)]["final"]["test_acc"] = (
                vr - 0.3
            )
            if s < 4:
                for a in ("base", "vr"):
                    run = final["runs"][p4.run_key("momentum", a, 6.4, s)]
                    run["curve"] = [dict(c, val_acc=80.0) for c in run["curve"]]
        self.assertEqual(round4.es.pairs_for_half_width(2.0 * np.sqrt(24 / 23), 0.5), 67)
        text, _ = self.section(self.write(tune=tune_state(), final=final))
        self.assertIn("**Registered readout: inconclusive.**", text)
        self.assertIn(
            "Descriptive, not registered: the paired SD was 2.04 pp for VR − base and 0.00 pp for "
            "VR − scalar-VR, 3.4 times the 0.6 pp that n = 24 was planned on (PROTOCOL4.md "
            "section 4); at the larger, about 67 pairs would give a ±0.5 pp half width.",
            text,
        )
        self.assertIn(
            "Descriptive, not registered: in 4 of 24 pairs neither base nor VR reached the "
            "target; each such pair counts a ratio of exactly 1 (41 / 41), as registered, which "
            "draws the mean and its CI toward 1. The target (89.50 %) is the base's mean over "
            "its 3 tuning seeds at its chosen rate (90.00 %) minus 0.5 pp; its 24 final runs "
            "averaged 90.00 % validation accuracy.",
            text,
        )
        # A conclusive E1 and no pair censored on both sides: neither line.
        text, _ = self.section(self.write(tune=tune_state(), final=final_state()))
        self.assertNotIn("Descriptive, not registered: the paired SD", text)
        self.assertNotIn("neither base nor VR reached", text)

    def test_e3_words_and_their_reading_with_e1(self):
        text, _ = self.section(self.write(tune=tune_state(), final=final_state()))
        self.assertIn(
            "VR − base -0.50 pp, 95 % CI [-0.50, -0.50]: VR's gap narrower; read with E1 (VR − base +0.30 pp, 95 % CI [+0.26, +0.34], Holm p 5.46e-13, better).",
            text,
        )


class Round4VerdictTest(tf.test.TestCase):
    def test_readme_block_gives_round_4_first_and_stays_at_five_lines(self):
        """Round 3 as it is on main (complete), round 4 complete ("helps"): the lead starts
        with round 4's words and CI, round 4's line takes round 2's place in the README's
        five, and docs/results.md's lead keeps round 2."""
        d = self.get_temp_dir()
        for name, state in (("tune", tune_state()), ("final", final_state())):
            with open(os.path.join(d, f"{name}.json"), "w") as f:
                json.dump(state, f)
        round2_dir = os.path.join(round2.RESULTS, "round2")
        lines = verdict.lines(round2_dir, round3.RESULTS, "LINK", d)
        self.assertLen(lines, 5)
        self.assertStartsWith(
            lines[0],
            "**Does it help? Round 4 (batch 8192, where large batch costs the base accuracy): "
            "yes with Momentum, beyond its step size (VR − base +0.30 pp, 95 % CI [",
        )
        self.assertIn("Round 3's registered readouts (Fashion-MNIST, batch 4096):", lines[0])
        self.assertFalse(any(line.startswith("- Round 2") for line in lines))
        self.assertStartsWith(lines[3], "- Round 4 (Momentum, batch 8192")
        full = verdict.lines(round2_dir, round3.RESULTS, "LINK", d, readme=False)
        self.assertLen(full, 6)
        self.assertStartsWith(full[1], "- Round 2 (Momentum, 6 pairs)")
        first = verdict.first_screen(round3.RESULTS, "LINK", d)
        self.assertStartsWith(first, "**Does VRGD help?** Round 4 (batch 8192")

    def test_round_4_running_reads_no_verdict(self):
        d = self.get_temp_dir()
        with open(os.path.join(d, "tune.json"), "w") as f:
            json.dump(tune_state(upto=47), f)
        round2_dir = os.path.join(round2.RESULTS, "round2")
        lines = verdict.lines(round2_dir, round3.RESULTS, "LINK", d)
        self.assertLen(lines, 5)
        self.assertStartsWith(lines[0], "**Does it help? Round 3's registered readouts")
        self.assertIn("tuning in progress: 47 of 81 runs; no verdict yet", lines[3])


class Round4PlotTest(tf.test.TestCase):
    def test_epochs_plot_bars_the_median_of_censored_epochs(self):
        """Epochs to the target are censored at 41: the bar is the median the text gives
        (a mean would move with how late "never" is set)."""
        from unittest import mock

        import matplotlib.axes

        d = self.get_temp_dir()
        final = final_state()
        for s in range(13):  # VR never reaches the target on 13 of 24 seeds: median 41
            run = final["runs"][p4.run_key("momentum", "vr", 6.4, s)]
            run["curve"] = [dict(c, val_acc=80.0) for c in run["curve"]]
        for name, state in (("tune", tune_state()), ("final", final)):
            with open(os.path.join(d, f"{name}.json"), "w") as f:
                json.dump(state, f)
        calls = []

        def hlines(ax, y, *args, **kwargs):
            calls.append((ax, y))

        with mock.patch.object(matplotlib.axes.Axes, "hlines", autospec=True) as m:
            m.side_effect = hlines
            round4.section(d, os.path.join(d, "img"), "img")
        epochs = [y for ax, y in calls if ax.get_ylabel().startswith("epochs to the E2 target")]
        self.assertAllClose(epochs, [20.0, 41.0, 20.0])  # base, VR, scalar-VR: the medians
