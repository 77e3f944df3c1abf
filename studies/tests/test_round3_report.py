"""Round 3's registered readout (studies/evidence/evidence_stats.py, studies/report/round3.py)
on hand-computed cases: the words of a contrast under Holm, the four readouts, the whole
chain from final runs, and the honest partial states of the report."""

import json
import math
import os

import evidence_stats as es
import protocol3 as p3
import tensorflow as tf
from report import round2, round3, verdict

ROUND2 = os.path.join(round2.RESULTS, "round2")

# Deltas (pp) of 16 pairs with hand-checked statistics:
# BIG: +2 +- 0.5 alternating -> mean 2, sd = 0.5 * sqrt(16 / 15) = 0.516398, se 0.129099,
#   t = 15.49, p ~ 1.5e-10: "better" (far above +1 pp).
# ZERO: +-0.1 alternating -> mean 0, sd 0.103280, se 0.025820, TOST t = 1 / 0.025820 =
#   38.7 on 15 df, p ~ 1e-16: "equivalent".
# WIDE: +-3 alternating -> mean 0, sd 3.0984, se 0.7746, p_t = 1, TOST t = 1.29,
#   p = 0.108: "inconclusive".
# NEG: -2 +- 0.5: "worse".
BIG = [2.5, 1.5] * 8
ZERO = [0.1, -0.1] * 8
WIDE = [3.0, -3.0] * 8
NEG = [-1.5, -2.5] * 8
# SLIGHT: -0.25 +- 0.05: CI about [-0.28, -0.22], inside +-1 pp and below 0: "equivalent"
#   first (the registered order), though the t-test (p ~ 1e-13) would also read "worse".
SLIGHT = [-0.2, -0.3] * 8


class WordsTest(tf.test.TestCase):
    def test_words_by_hand(self):
        self.assertEqual(es.contrast_words(1.2, 0.04, 0.9), "better")
        self.assertEqual(es.contrast_words(0.9, 0.001, 0.9), "inconclusive")  # mean < 1 pp
        self.assertEqual(es.contrast_words(0.9, 0.001, 0.02), "equivalent")
        self.assertEqual(es.contrast_words(0.1, 0.5, 0.024), "equivalent")
        self.assertEqual(es.contrast_words(0.1, 0.5, 0.026), "inconclusive")  # TOST at 2.5 %
        self.assertEqual(es.contrast_words(-0.5, 0.01, 0.3), "worse")
        self.assertEqual(es.contrast_words(-0.5, 0.01, 0.01), "equivalent")  # rule 2 first
        self.assertEqual(es.contrast_words(float("nan"), 0.0, 0.0), "inconclusive")

    def test_holm_in_the_family(self):
        """Two contrasts, TOST p 0.012 and 0.02 (both < 0.025 alone): Holm gives 0.024
        and max(0.024, 0.02) = 0.024, both still "equivalent"; with 0.013 and 0.02 the
        smaller becomes 0.026: neither is equivalent (the larger is then 0.026 too)."""
        self.assertAllClose(es.holm([0.012, 0.02]), [0.024, 0.024])
        self.assertAllClose(es.holm([0.013, 0.02]), [0.026, 0.026])
        fam = es.primary_family({"a": BIG, "b": WIDE})
        self.assertAllClose(fam["a"]["mean"], 2.0)
        self.assertAllClose(fam["a"]["sd"], 0.5 * math.sqrt(16 / 15))
        self.assertAllClose(fam["a"]["p_t_holm"], 2 * fam["a"]["p_t"])  # the smaller p
        self.assertAllClose(fam["b"]["p_t_holm"], 1.0)
        self.assertAllClose(fam["b"]["p_tost"], 0.108, atol=2e-3)
        self.assertEqual(fam["a"]["words"], "better")
        self.assertEqual(fam["b"]["words"], "inconclusive")

    def test_the_four_readouts(self):
        self.assertEqual(es.readout("better", "better"), "the GSNR weighting helps")
        self.assertEqual(
            es.readout("better", "equivalent"), "VRGD helps only through its step size"
        )
        self.assertEqual(
            es.readout("equivalent", "inconclusive"), "no benefit at a finely tuned base"
        )
        self.assertEqual(es.readout("equivalent", "better"), "no benefit at a finely tuned base")
        for words in (("better", "inconclusive"), ("better", "worse"), ("worse", "better"),
                      ("inconclusive", "equivalent")):  # fmt: skip
            self.assertEqual(es.readout(*words), "inconclusive")

    def test_pairs_for_half_width(self):
        """sd 1.77: t_{0.975,14} 1.77 / sqrt(15) = 2.1448 * 0.45701 = 0.980 <= 1, and
        n = 14 gives 2.1604 * 0.47305 = 1.022 > 1, so 15 (the review's number)."""
        self.assertEqual(es.pairs_for_half_width(1.77), 15)


def by_arm_from(deltas_vr_minus):
    """{arm: {seed: run}} with base 70 %, VR = base + d(vr-base), scalar-VR = VR -
    d(vr-scalar_vr), shuffled = VR - 1."""
    out = {a: {} for a in p3.ARMS}
    for s in p3.FINAL_SEEDS:
        base = 70.0 + 0.3 * (s % 5)
        vr = base + deltas_vr_minus["base"][s]
        accs = {"base": base, "vr": vr, "scalar_vr": vr - deltas_vr_minus["scalar_vr"][s],
                "shuffled_nm": vr - 1.0}  # fmt: skip
        for a, acc in accs.items():
            out[a][s] = {"final": {"test_acc": acc, "val_acc": acc}, "seed": s}
    return out


class ReadoutFromRunsTest(tf.test.TestCase):
    def test_each_outcome_from_final_runs(self):
        cases = [
            (BIG, BIG, "the GSNR weighting helps"),
            (BIG, ZERO, "VRGD helps only through its step size"),
            (ZERO, WIDE, "no benefit at a finely tuned base"),
            (WIDE, BIG, "inconclusive"),
            (NEG, ZERO, "inconclusive"),
        ]
        for d_base, d_scalar, want in cases:
            r = round3.registered_readout(by_arm_from({"base": d_base, "scalar_vr": d_scalar}))
            self.assertEqual(r["readout"], want, (d_base[:2], d_scalar[:2]))
            self.assertAllClose(r["primary"]["vr-base"]["mean"], sum(d_base) / 16)
            self.assertAllClose(r["secondary"]["vr-shuffled_nm"]["mean"], 1.0)
        lines = round3.readout_lines(r, by_arm_from({"base": NEG, "scalar_vr": ZERO}))
        text = "\n".join(lines)
        self.assertIn("VR − base: -2.00 pp", text)
        self.assertIn("**worse**", text)
        self.assertIn("**Registered readout: inconclusive.**", text)
        self.assertNotIn("Beside the words", text)
        self.assertNotIn("collapsed)", text)

    def test_final_collapses_and_secondary_words_name_their_arm(self):
        by_arm = by_arm_from({"base": BIG, "scalar_vr": ZERO})
        for s in (0, 1, 5, 9):
            by_arm["base"][s]["final"]["val_acc"] = 10.0
        by_arm["base"][2]["final"]["test_acc"] = 10.0  # test accuracy does not define it
        text = "\n".join(round3.readout_lines(round3.registered_readout(by_arm), by_arm))
        self.assertIn("(4 of 16 collapsed)", text)
        self.assertIn("collapsed = final validation accuracy below 20 %", text)
        by_arm = by_arm_from({"base": NEG, "scalar_vr": [d - 2.0 for d in NEG]})  # sc-VR - base +2
        text = "\n".join(round3.readout_lines(round3.registered_readout(by_arm), by_arm))
        self.assertIn("- scalar-VR − base: +2.00 pp, 95 % CI", text)
        self.assertIn('"scalar-VR better"', text)

    def test_equivalent_below_zero_is_said(self):
        """LAMB's case: both primary contrasts equivalent with CIs below 0."""
        by_arm = by_arm_from({"base": SLIGHT, "scalar_vr": SLIGHT})
        r = round3.registered_readout(by_arm)
        self.assertEqual(r["readout"], "no benefit at a finely tuned base")
        self.assertEqual(r["primary"]["vr-base"]["words"], "equivalent")
        text = "\n".join(round3.readout_lines(r, by_arm))
        self.assertIn("Beside the words: the 95 % CI of VR − base (below 0, Holm t-test p", text)
        self.assertIn("and of VR − scalar-VR (below 0", text)
        self.assertEqual(
            round3._word(r["primary"]["vr-base"]), "equivalent, but slightly lower: CI below 0"
        )
        self.assertIsNone(
            round3.sign_note(
                round3.registered_readout(by_arm_from({"base": ZERO, "scalar_vr": WIDE}))
            )
        )


class UserWordsTest(tf.test.TestCase):
    def test_a_detectable_deficit_never_reads_did_as_well(self):
        """LAMB's case: "no benefit" with VR − base's CI below 0 reads "slightly worse"."""
        by_arm = by_arm_from({"base": SLIGHT, "scalar_vr": SLIGHT})
        r = round3.registered_readout(by_arm)
        words = verdict.in_words(r["readout"], "LAMB", r["primary"]["vr-base"])
        self.assertStartsWith(words, "not with LAMB: VR-LAMB was slightly worse than a finely")
        self.assertNotIn("did as well", words)
        self.assertIn("95 % CI [", words)
        r = round3.registered_readout(by_arm_from({"base": ZERO, "scalar_vr": WIDE}))
        self.assertEqual(r["readout"], "no benefit at a finely tuned base")
        self.assertIn(
            "did as well", verdict.in_words(r["readout"], "LAMB", r["primary"]["vr-base"])
        )

    def test_collapses_carry_an_inconclusive_mean_and_holm_p_stands_beside_the_ci(self):
        """Momentum's case: the base collapses on some seeds; the headline gives the median,
        the seeds, Holm's p and the step-size control beside the mean."""
        by_arm = by_arm_from({"base": WIDE, "scalar_vr": BIG})
        for s in (0, 1, 5):
            by_arm["base"][s]["final"]["val_acc"] = 10.0
        r = round3.registered_readout(by_arm)
        self.assertEqual(r["readout"], "inconclusive")
        words = verdict.in_words(r["readout"], "Momentum", r["primary"]["vr-base"], 3)
        self.assertIn("the base's 3 collapsed seeds", words)
        note = round3.collapse_note(by_arm, r)
        self.assertIn("The base collapsed on 3 of 16 seeds (validation below 20 %), VR on 0", note)
        self.assertIn("scalar-VR (VR's step size without the per-element weighting) − base", note)
        d = round3.deltas(by_arm, "vr", "base")
        text = round3._contrast(r["primary"]["vr-base"], d)
        self.assertRegex(text, r"^[+-]\d+\.\d\d pp \(median [+-]\d+\.\d\d pp, \d+ of 16 seeds")
        self.assertIn("Holm p ", text)
        self.assertEqual(
            round3.seeds_text([1.0, -2.0, 3.0]), "median +1.00 pp, 2 of 3 seeds favour VR"
        )

    def test_a_window_of_non_adjacent_rates_is_said(self):
        self.assertEqual(round3._gaps({"count": 2, "log2_width": 0.25}), "")
        self.assertIn(
            "not adjacent: 2 grid rate(s)", round3._gaps({"count": 2, "log2_width": 0.75})
        )
        self.assertEqual(round3._gaps({"count": 1, "log2_width": 0.0}), "")


class CommitLineTest(tf.test.TestCase):
    def test_names_the_commit_and_the_rerun(self):
        prov = {"git_commit": "f199ea92c9", "dirty": False}
        final = {"runs": {"a": {"provenance": prov}, "b": {"provenance": prov}}}
        text = round3.commit_line(final, None)
        self.assertIn("commit `f199ea9` (every run's provenance; 0 of 2 from a dirty tree)", text)
        self.assertIn("Not yet rerun", text)
        rerun = {"provenance": {"git_commit": "abcdef012"}, "identical_curve": True}
        replicate = {"runs": {"a": {**rerun, "max_abs_val_curve_diff_pp": 0.0},
                              "b": {**rerun, "identical_curve": False,
                                    "max_abs_val_curve_diff_pp": 0.12}}}  # fmt: skip
        text = round3.commit_line(final, replicate)
        self.assertIn("Rerun at `abcdef0`", text)
        self.assertIn("1 of 2 runs (a, b) gave the same validation curve", text)
        self.assertIn("at any epoch 0.12 pp", text)
        self.assertIn("No final run", round3.commit_line(None, None))


class DisclosureTest(tf.test.TestCase):
    def test_lamb_grid_parenthesis_is_disclosed_with_where_the_choice_lies(self):
        grid = [p3.rate(0.02, i) for i in range(-4, 5)]
        text = round3.disclosure("lamb", grid, {a: 0.0336359 for a in p3.ARMS})
        self.assertIn("0.0119 – 0.0336, which is the range of i = −3 … 3 only", text)
        self.assertIn("The tuned grid has 9 rates; the chosen rates (0.0336359) lie inside", text)
        text = round3.disclosure("lamb", grid, {"base": 0.04, "vr": 0.0336359})
        self.assertIn("(0.0336359, 0.04) lie outside", text)
        self.assertNotIn("tuned grid", round3.disclosure("lamb", grid, None))
        self.assertEqual(round3.disclosure("momentum", grid, {"base": 0.05}), "")


class PartialStateTest(tf.test.TestCase):
    def _tune_runs(self, n, pair="momentum"):
        """The first ``n`` tuning runs in the runner's order, validation accuracy peaking at
        the grid's middle rate (Momentum 0.0707107, LAMB 0.02: no edge extension)."""
        runs = {}
        grid, _ = p3.tune_grid({}, pair)
        order = [(s, i, a) for s in p3.TUNE_SEEDS for i in range(len(grid)) for a in p3.ARMS]
        for s, i, a in order[:n]:
            runs[p3.run_key(pair, a, grid[i], s)] = {
                "pair": pair, "arm": a, "peak_lr": grid[i], "seed": s,
                "final": {"val_acc": 70.0 - abs(i - 4)},
                "curve": [{"epoch": 1, "val_acc": 50.0}], "diagnostics": [],
            }  # fmt: skip
        return runs

    def _write(self, d, phase, runs, **extra):
        with open(os.path.join(d, f"{phase}.json"), "w") as f:
            json.dump({"phase": phase, "runs": runs, **extra}, f)

    def test_tuning_in_progress_has_no_verdict(self):
        d = self.get_temp_dir()
        self._write(d, "tune", self._tune_runs(10))
        text = round3.section(d, os.path.join(d, "img"), "img")
        self.assertIn("tuning in progress: 10 of 108 runs", text)
        self.assertIn("No verdict", text)
        self.assertNotIn("Registered readout", text)
        self.assertIn("tuning in progress: 10 of 108 runs; no verdict yet", round3.headline(d))
        self.assertIsNone(round3.readout_if_complete(d))

    def test_final_in_progress_has_no_verdict_and_no_test_numbers(self):
        d = self.get_temp_dir()
        self._write(d, "tune", self._tune_runs(108))
        final = {}
        for s in range(3):  # 3 seeds x 4 arms = 12 of 64
            for a in p3.ARMS:
                final[p3.run_key("momentum", a, 0.0707107, s)] = {
                    "pair": "momentum", "arm": a, "peak_lr": 0.0707107, "seed": s,
                    "final": {"val_acc": 70.0, "test_acc": 55.25 + s},
                    "curve": [{"epoch": 1, "val_acc": 50.0}], "diagnostics": [],
                }  # fmt: skip
        self._write(d, "final", final)
        text = round3.section(d, os.path.join(d, "img"), "img")
        self.assertIn("tuning done (108 runs); final phase in progress: 12 of 64 runs", text)
        self.assertIn("Tuned rates: base 0.0707107, VR 0.0707107", text)
        self.assertNotIn("Registered readout", text)
        self.assertNotIn("55.25", text)  # no final test accuracy before the phase completes
        self.assertNotIn("56.25", text)
        self.assertIsNone(round3.readout_if_complete(d))

    def _final_runs(self, pair, lr, deltas):
        """64 final runs at ``lr`` whose test accuracies follow :func:`by_arm_from`."""
        runs = {}
        for a, seeds in by_arm_from(deltas).items():
            for s, r in seeds.items():
                runs[p3.run_key(pair, a, lr, s)] = {
                    "pair": pair, "arm": a, "peak_lr": lr, "seed": s,
                    "final": {"val_acc": 70.0, **r["final"]}, "curve": [], "diagnostics": [],
                }  # fmt: skip
        return runs

    def test_verdict_with_both_pairs_fits_five_lines(self):
        """Momentum complete (GSNR helps), LAMB in its final phase, then complete (step
        size only): the lead names each pair's readout, round 2 takes one line, and the
        README block stays at five lines."""
        d = self.get_temp_dir()
        self._write(d, "tune", {**self._tune_runs(108), **self._tune_runs(108, "lamb")})
        final = self._final_runs("momentum", 0.0707107, {"base": BIG, "scalar_vr": BIG})
        self._write(d, "final", final)
        lines = verdict.lines(ROUND2, d, "LINK")
        self.assertLen(lines, 5)
        self.assertEqual(
            lines[0],
            "**Does it help? Round 3's registered readouts (Fashion-MNIST, batch 4096): yes "
            "with Momentum, beyond its step size; LAMB still running.**",
        )
        self.assertStartsWith(lines[1], "- Round 2 (Momentum, 6 pairs): VR − base +1.65 pp")
        self.assertIn("final phase in progress: 0 of 64 runs; no verdict yet", lines[3])
        final.update(self._final_runs("lamb", 0.02, {"base": BIG, "scalar_vr": ZERO}))
        self._write(d, "final", final)
        lines = verdict.lines(ROUND2, d, "LINK")
        self.assertLen(lines, 5)
        self.assertIn(
            "; with LAMB only as a step size (tuning LAMB's rate does the same).**",
            lines[0],
        )
        self.assertStartsWith(lines[3], "- Round 3 (LAMB, 16 pairs): **VRGD helps only through")
        self.assertIn("VR − base +2.00 pp", lines[3])
        self.assertEqual(lines[4], "- Every arm, CI and plot: LINK.")


if __name__ == "__main__":
    tf.test.main()
