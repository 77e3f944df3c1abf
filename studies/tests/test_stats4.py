"""Round 4's registered endpoint rules (studies/evidence/stats4.py, PROTOCOL4.md section 5)
on hand-computed cases: E1's words at the ±0.5 pp margin without a margin clause for
"better", the Hodges-Lehmann interval against the inverted exact signed-rank test, the
readouts, E2's epochs to the target and its words."""

import math

import numpy as np
import stats4
import tensorflow as tf
from scipy import stats

# 24 pairs, alternating: mean 0.3, sd 0.1 * sqrt(24 / 23), se 0.02085, t 14.4: "better" here
# (round 3's rule, mean >= 1 pp, would not say so).
SMALL_GAIN = [0.4, 0.2] * 12
# ±1.5 alternating: mean 0, se = 1.5 * sqrt(24 / 23) / sqrt(24) = 0.3127, TOST t = 0.5 /
# 0.3127 = 1.599 on 23 df: p 0.062, "inconclusive" at ±0.5 pp (at round 3's ±1 pp, t 3.2).
WIDE = [1.5, -1.5] * 12


class E1Test(tf.test.TestCase):
    def test_words_in_the_registered_order(self):
        self.assertEqual(stats4.e1_words(0.3, 0.04, 0.9), "better")  # no margin clause
        self.assertEqual(stats4.e1_words(0.3, 0.06, 0.02), "equivalent")
        self.assertEqual(stats4.e1_words(0.3, 0.06, 0.026), "inconclusive")
        self.assertEqual(stats4.e1_words(-0.3, 0.01, 0.3), "worse")
        self.assertEqual(stats4.e1_words(-0.3, 0.01, 0.01), "equivalent")  # rule 2 first
        self.assertEqual(stats4.e1_words(0.0, 0.01, 0.3), "inconclusive")
        self.assertEqual(stats4.e1_words(float("nan"), 0.0, 0.0), "inconclusive")

    def test_family_at_the_half_point_margin(self):
        fam = stats4.e1_family({"vr-base": SMALL_GAIN, "vr-scalar_vr": WIDE})
        gain, wide = fam["vr-base"], fam["vr-scalar_vr"]
        self.assertAllClose(gain["mean"], 0.3)
        self.assertEqual(gain["words"], "better")
        self.assertAllClose(gain["p_t_holm"], 2 * gain["p_t"])  # the smaller of two p
        se = 1.5 * math.sqrt(24 / 23) / math.sqrt(24)
        self.assertAllClose(wide["p_tost"], stats.t.sf(0.5 / se, 23), rtol=1e-6)
        self.assertAllClose(wide["p_tost"], 0.0618, atol=1e-3)
        self.assertAllClose(wide["p_t_holm"], 1.0)
        self.assertEqual(wide["words"], "inconclusive")
        self.assertAllClose(wide["hl"], 0.0)
        self.assertEqual(wide["p_wilcoxon"] > 0.5, True)

    def test_readouts(self):
        self.assertEqual(stats4.readout("better", "better"), "helps")
        self.assertEqual(stats4.readout("better", "equivalent"), "helps only through its step size")
        self.assertEqual(
            stats4.readout("better", "inconclusive"), "helps only through its step size"
        )
        self.assertEqual(stats4.readout("equivalent", "better"), "no benefit")
        self.assertEqual(stats4.readout("worse", "worse"), "costs accuracy")
        self.assertEqual(stats4.readout("inconclusive", "better"), "inconclusive")


class HodgesLehmannTest(tf.test.TestCase):
    def test_six_pairs_by_hand(self):
        """n = 6: P(T+ <= 0) = 1/64 <= 0.025 < P(T+ <= 1) = 2/64, so c = 1 and the interval
        is the smallest and largest Walsh average, [1, 6]; the estimate is the median of the
        21 Walsh averages, 3.5; the exact two-sided p with every delta positive is 2/64."""
        hl = stats4.hodges_lehmann([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
        self.assertAllClose(hl["estimate"], 3.5)
        self.assertAllClose(hl["ci"], [1.0, 6.0])
        self.assertAllClose(hl["p_wilcoxon"], 2 / 64)

    def test_interval_inverts_the_exact_signed_rank_test(self):
        """n = 24: the tables' two-sided 5 % critical value is 81, so the bounds are the
        82nd smallest and largest of the 300 Walsh averages; just inside a bound the exact
        test does not reject, just outside it does."""
        d = np.random.default_rng(1).normal(0.2, 0.6, 24)
        hl = stats4.hodges_lehmann(d)
        i, j = np.triu_indices(24)
        walsh = np.sort((d[i] + d[j]) / 2)
        self.assertAllClose(hl["ci"], [walsh[81], walsh[300 - 82]])
        lo, hi = hl["ci"]
        eps = 1e-6

        def p(theta):
            return stats.wilcoxon(d - theta, method="exact").pvalue

        self.assertGreater(p(lo + eps), 0.05)
        self.assertLess(p(lo - eps), 0.05)
        self.assertGreater(p(hi - eps), 0.05)
        self.assertLess(p(hi + eps), 0.05)

    def test_recorded_ties_tie(self):
        """Accuracies recorded to 0.01 pp: 91.33 - 91.23 and 91.13 - 91.23 are ±0.1 up to
        their float error, 12 of each: they tie in rank, so p is 1 and the interval [0, 0]
        (before the rounding, p was 0.034)."""
        d = np.subtract([91.33, 91.13] * 12, [91.23] * 24)
        hl = stats4.hodges_lehmann(d)
        self.assertEqual(hl["p_wilcoxon"], 1.0)
        self.assertAllClose(hl["ci"], [0.0, 0.0])

    def test_zeros_and_bad_input(self):
        hl = stats4.hodges_lehmann([0.0] * 8)
        self.assertEqual(hl["p_wilcoxon"], 1.0)
        self.assertAllClose(hl["ci"], [0.0, 0.0])
        with self.assertRaisesRegex(ValueError, ">= 6 finite"):
            stats4.hodges_lehmann([1.0] * 5)
        with self.assertRaisesRegex(ValueError, ">= 6 finite"):
            stats4.hodges_lehmann([1.0] * 7 + [float("nan")])


class E2Test(tf.test.TestCase):
    def test_epochs_to_target(self):
        curve = [50.0, 80.0, 89.6, 89.4, 90.0]
        self.assertEqual(stats4.epochs_to_target(curve, 89.5, 40), 3)
        self.assertEqual(stats4.epochs_to_target(curve, 95.0, 40), 41)  # censored
        self.assertEqual(stats4.epochs_to_target([float("nan"), None, 91.0], 90.0, 40), 3)
        self.assertEqual(stats4.epochs_to_target(curve, 89.5, 2), 3)  # past the budget

    def test_words_in_the_registered_order(self):
        self.assertEqual(stats4.e2_words(math.log2(1.3), [0.2, 0.55], 0.01), "faster")
        self.assertEqual(stats4.e2_words(0.2, [0.1, 0.3], 0.01), "no speed-up")  # 1.15x < 1.25
        self.assertEqual(stats4.e2_words(-0.5, [-0.7, -0.3], 0.001), "slower")
        self.assertEqual(stats4.e2_words(-0.1, [-0.2, -0.05], 0.01), "no speed-up")  # first
        self.assertEqual(stats4.e2_words(0.2, [-0.1, 0.5], 0.2), "inconclusive")
        self.assertEqual(stats4.e2_words(0.5, [0.1, 0.9], 0.06), "inconclusive")
        self.assertEqual(stats4.e2_words(float("nan"), [0, 0], 0.0), "inconclusive")

    def test_family_of_log2_ratios(self):
        """VR at 10 epochs, the base at 20 on every seed: log2 ratio 1, the interval the point,
        "faster" 2x. Scalar-VR at 19 and 21 against VR's 20: mean log2 about 0, CI inside
        ±log2(1.25): "no speed-up"."""
        fam = stats4.e2_family(
            {"vr": [10] * 24, "base": [20] * 24, "scalar_vr": [10] * 24},
            [("vr", "base"), ("vr", "scalar_vr")],
        )
        self.assertAllClose(fam["vr-base"]["ratio"], 2.0)
        self.assertEqual(fam["vr-base"]["words"], "faster")
        self.assertAllClose(fam["vr-scalar_vr"]["ratio"], 1.0)
        fam = stats4.e2_family({"vr": [20] * 24, "scalar_vr": [19, 21] * 12}, [("vr", "scalar_vr")])
        s = fam["vr-scalar_vr"]
        want = np.log2(np.array([19, 21] * 12) / 20)
        self.assertAllClose(s["mean"], want.mean())
        self.assertAllClose(s["p_t_holm"], stats.ttest_1samp(want, 0).pvalue)
        self.assertEqual(s["words"], "no speed-up")
