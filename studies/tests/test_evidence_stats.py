"""The verdict rules and statistics of the Fashion-MNIST evidence protocol
(studies/evidence/evidence_stats.py) on hand-made deltas."""

import math
import os

import evidence_stats as es
import numpy as np
import tensorflow as tf


class VerdictTest(tf.test.TestCase):
    def test_rules_in_order(self):
        self.assertEqual(es.verdict(1.5, 0.5, 2.5), "VR better")
        # CI above 0 but mean below +1 pp and CI not inside the margin: inconclusive.
        self.assertEqual(es.verdict(0.9, 0.2, 1.6), "inconclusive")
        # CI above 0 and mean >= 1 wins over "equivalent" only if CI leaves the margin:
        # (0.2, 0.9) with mean 0.55 is inside +-1 -> equivalent.
        self.assertEqual(es.verdict(0.55, 0.2, 0.9), "equivalent")
        self.assertEqual(es.verdict(0.0, -0.9, 0.9), "equivalent")
        # Inside the margin and below 0: equivalent comes first.
        self.assertEqual(es.verdict(-0.5, -0.8, -0.2), "equivalent")
        self.assertEqual(es.verdict(-2.0, -3.0, -1.0), "worse")
        self.assertEqual(es.verdict(-1.0, -1.5, -0.5), "worse")
        self.assertEqual(es.verdict(0.0, -1.5, 1.5), "inconclusive")
        self.assertEqual(es.verdict(0.0, -1.0, 0.5), "inconclusive")  # -1 is not inside
        self.assertEqual(es.verdict(float("nan"), 0.0, 1.0), "inconclusive")

    def test_paired_summary_by_hand(self):
        """Deltas (1, 2, 3, 4, 5, 6): mean 3.5, sd = sqrt(17.5 / 5) = sqrt(3.5) = 1.8708,
        se = 1.8708 / sqrt(6) = 0.76376, t_{0.975, 5} = 2.570582,
        half width 1.96334 -> CI (1.53666, 5.46334): above 0, mean >= 1 -> VR better.
        t = 3.5 / 0.76376 = 4.5826, two-sided p (5 df) = 0.005934."""
        s = es.paired_summary([1, 2, 3, 4, 5, 6])
        self.assertEqual(s["n"], 6)
        self.assertAllClose(s["mean"], 3.5)
        self.assertAllClose(s["sd"], math.sqrt(3.5))
        self.assertAllClose(s["t_ci"], [1.53666, 5.46334], atol=1e-4)
        self.assertAllClose(s["p_t"], 0.005934, atol=2e-5)
        self.assertEqual(s["verdict"], "VR better")
        # Percentile bootstrap of the mean lies within the data range and around the mean.
        low, high = s["boot_ci"]
        self.assertTrue(1.0 < low < 3.5 < high < 6.0, s["boot_ci"])
        self.assertGreater(s["p_tost"], 0.5)  # far outside the +-1 margin

    def test_equivalence_by_tost(self):
        """Deltas (-0.1, 0.1, 0.0, 0.05, -0.05, 0.0): mean 0, sd = sqrt(0.025 / 5)
        = 0.070711, se 0.028868; t CI +-0.074207: inside +-1 -> equivalent; TOST
        t = 1 / 0.028868 = 34.64 on 5 df, p ~ 2e-7."""
        s = es.paired_summary([-0.1, 0.1, 0.0, 0.05, -0.05, 0.0])
        self.assertAllClose(s["t_ci"], [-0.074207, 0.074207], atol=1e-5)
        self.assertEqual(s["verdict"], "equivalent")
        self.assertEqual(s["verdict_boot"], "equivalent")
        self.assertLess(s["p_tost"], 1e-5)

    def test_worse_and_inconclusive(self):
        self.assertEqual(es.paired_summary([-3, -4, -2, -3, -5, -4])["verdict"], "worse")
        self.assertEqual(es.paired_summary([-8, 9, 3, -6, 7, -2])["verdict"], "inconclusive")

    def test_constant_deltas_and_bad_input(self):
        s = es.paired_summary([0.5, 0.5, 0.5])
        self.assertEqual(s["t_ci"], [0.5, 0.5])
        self.assertEqual(s["verdict"], "equivalent")
        with self.assertRaisesRegex(ValueError, "deltas"):
            es.paired_summary([1.0])
        with self.assertRaisesRegex(ValueError, "deltas"):
            es.paired_summary([1.0, float("nan")])


class SecondaryTest(tf.test.TestCase):
    def test_holm_by_hand(self):
        """p = (0.01, 0.04, 0.03, 0.005), m = 4: sorted 0.005 (x4 = 0.02), 0.01 (x3 =
        0.03), 0.03 (x2 = 0.06), 0.04 (x1 = 0.04 -> monotone 0.06)."""
        self.assertAllClose(es.holm([0.01, 0.04, 0.03, 0.005]), [0.03, 0.06, 0.06, 0.02])
        # A missing p counts as 1 and keeps m = 4: 0.01 x 4 = 0.04.
        self.assertAllClose(es.holm([0.01, None, float("nan"), 0.5]), [0.04, 1.0, 1.0, 1.0])

    def test_collapse_exact_mcnemar(self):
        """6 pairs; base collapses in 5 (acc 10 %), VR in 0: 5 discordant pairs all one
        way, two-sided binomial p = 2 * 0.5**5 = 0.0625."""
        r = es.collapse_test([10, 10, 10, 10, 10, 85], [85] * 6)
        self.assertEqual(r["discordant"], [5, 0])
        self.assertAllClose(r["p"], 0.0625)
        self.assertAllClose(r["base_rate"], 5 / 6)
        self.assertEqual(es.collapse_test([85, 85], [84, 86])["p"], 1.0)

    def test_lr_window(self):
        rates = [0.0125, 0.025, 0.05, 0.1, 0.2, 0.4]
        accs = [80.0, 85.5, 86.0, 85.2, 84.0, 10.0]
        w = es.lr_window_width(rates, accs)
        # Within 1 pp of 86.0: 0.025, 0.05, 0.1 -> log2(0.1 / 0.025) = 2.
        self.assertEqual(w["best_lr"], 0.05)
        self.assertEqual(w["count"], 3)
        self.assertAllClose(w["log2_width"], 2.0)

    def test_contiguous_lr_window_stops_at_the_first_rate_outside(self):
        # Round 3's Momentum base (evidence review 1.3.3): 0.0841 and 0.141 are within 1 pp
        # of the best, 0.1 and 0.119 between them are not. Unsorted on purpose.
        rates = [0.141, 0.0707, 0.0841, 0.1, 0.119, 0.168]
        accs = [72.5, 70.0, 73.0, 71.0, 71.5, 60.0]
        w = es.contiguous_lr_window(rates, accs)
        self.assertEqual(
            (w["best_lr"], w["low"], w["high"], w["count"]), (0.0841, 0.0841, 0.0841, 1)
        )
        self.assertEqual(es.lr_window_width(rates, accs)["count"], 2)  # not adjacent
        # Round 4's Momentum base after 85 tuning runs: 3.8-7.61 (5 rates, x2 wide);
        # 3.2 (89.15) and 9.05 (86.38) are more than 1 pp below 6.4's 90.65.
        grid = [2.69087, 3.2, 3.80546, 4.52548, 5.38174, 6.4, 7.61093, 9.05097, 10.7635, 12.8]
        accs = [90.44, 89.15, 90.50, 90.22, 90.05, 90.65, 90.41, 86.38, 86.13, 48.49]
        w = es.contiguous_lr_window(grid, accs)
        self.assertEqual((w["low"], w["high"], w["count"]), (3.80546, 7.61093, 5))
        self.assertAllClose(w["log2_width"], 1.0)
        # A NaN ends the window; at the grid's edge it ends there.
        w = es.contiguous_lr_window([1.0, 2.0, 4.0], [90.0, float("nan"), 89.5])
        self.assertEqual((w["low"], w["high"], w["count"], w["log2_width"]), (1.0, 1.0, 1, 0.0))
        w = es.contiguous_lr_window([1.0, 2.0], [float("nan")] * 2)
        self.assertEqual((w["best_lr"], w["count"]), (None, 0))

    def test_steps_to_target_and_gap_at_loss(self):
        self.assertEqual(es.steps_to_target([13, 26, 39], [50.0, 80.0, 90.0], 80.0), 26)
        self.assertIsNone(es.steps_to_target([13, 26], [50.0, 60.0], 80.0))
        # Loss 1.0 -> 0.5 with gap 2 -> 4: at loss 0.75 halfway, gap 3.
        self.assertAllClose(es.gap_at_loss([2.0, 1.0, 0.5], [1.0, 2.0, 4.0], 0.75), 3.0)
        self.assertIsNone(es.gap_at_loss([2.0, 1.0], [1.0, 2.0], 0.5))
        self.assertTrue(np.isfinite(es.gap_at_loss([0.1], [5.0], 0.5)))


if __name__ == "__main__":
    tf.test.main()


class TuneGridTest(tf.test.TestCase):
    """evidence_stats.tune_grid (studies/evidence/round2.py's tuning phase): a best rate at a grid
    edge extends both sides' grids."""

    def _runs(self, accs, batch=256, seeds=(1000, 1001)):
        """accs: {side: {lr: val_acc}} -> the runs dict of tune.json."""
        runs = {}
        for side, per in accs.items():
            for lr, acc in per.items():
                for s in seeds:
                    key = es.run_key("momentum", side, batch, lr, s)
                    runs[key] = {"final": {"val_acc": acc}}
        return runs

    def test_edge_extends_both_sides_until_interior(self):
        grid = [0.0125, 0.025, 0.05, 0.1, 0.2, 0.4]
        acc = {lr: 80.0 + i for i, lr in enumerate(grid)}  # best at the top edge
        runs = self._runs({"base": acc, "vr": {lr: 85.0 - i for i, lr in enumerate(grid)}})
        rates, chosen = es.tune_grid(runs, "momentum", 256, 0.05, [1000, 1001])
        # Base's best is at the top edge, VR's at the bottom: one value added on each.
        self.assertEqual(rates, [0.00625] + grid + [0.8])
        self.assertIsNone(chosen)  # their runs are missing
        runs.update(self._runs({"base": {0.00625: 50.0, 0.8: 90.0}, "vr": {0.00625: 84.0}}))
        runs.update(self._runs({"vr": {0.8: 60.0}}))
        rates, chosen = es.tune_grid(runs, "momentum", 256, 0.05, [1000, 1001])
        # VR's best 0.0125 is interior now; base's best 0.8 is the new top edge: extend.
        self.assertEqual(rates, [0.00625] + grid + [0.8, 1.6])
        self.assertIsNone(chosen)
        runs.update(self._runs({"base": {1.6: 10.0}, "vr": {1.6: 10.0}}))
        rates, chosen = es.tune_grid(runs, "momentum", 256, 0.05, [1000, 1001])
        self.assertEqual(chosen, {"base": 0.8, "vr": 0.0125})
        self.assertLen(rates, 9)

    def test_missing_seed_means_not_done(self):
        grid = [0.0125, 0.025, 0.05, 0.1, 0.2, 0.4]
        runs = self._runs({"base": dict.fromkeys(grid, 80.0), "vr": dict.fromkeys(grid, 80.0)})
        del runs[es.run_key("momentum", "vr", 256, 0.1, 1001)]
        rates, chosen = es.tune_grid(runs, "momentum", 256, 0.05, [1000, 1001])
        self.assertEqual(rates, grid)
        self.assertIsNone(chosen)


class HeadlineTest(tf.test.TestCase):
    """The README/report headline of the evidence section, from hand-made phase files."""

    def _write(self, directory, phase, runs, **extra):
        import json

        with open(os.path.join(directory, f"{phase}.json"), "w") as f:
            json.dump({"phase": phase, "runs": runs, **extra}, f)

    def _run(self, side, batch, seed, acc, lr=0.1):
        return {
            "pair": "momentum",
            "side": side,
            "batch": batch,
            "seed": seed,
            "peak_lr": lr,
            "final": {"test_acc": acc},
        }

    def test_primary_endpoint_numbers_and_verdict(self):
        from report import round2 as ev

        d = self.get_temp_dir()
        self.assertEqual(ev.headline(d), [])  # nothing run: no headline
        base = [70.0, 71.0, 72.0, 73.0, 74.0, 75.0]
        deltas = [0.1, -0.2, 0.3, 0.0, 0.2, -0.1]  # mean +0.05, sd 0.1871
        runs = {}
        for i, (b, dl) in enumerate(zip(base, deltas)):
            runs[f"b{i}"] = self._run("base", 4096, i, b, lr=0.05)
            runs[f"v{i}"] = self._run("vr", 4096, i, b + dl)
        self._write(d, "final", runs)
        self._write(d, "tune", {}, best={"momentum/b4096": {"base": 0.05, "vr": 0.1}})
        lines = ev.headline(d)
        self.assertLen(lines, 1)
        # t(0.975, 5) = 2.5706; half width 2.5706 * 0.1871 / sqrt(6) = 0.196
        self.assertIn("Δ = VR − base +0.05 pp, 95 % CI [-0.15, +0.25]", lines[0])
        self.assertIn('"equivalent"', lines[0])
        self.assertIn("(peak learning rates: base 0.05, VR 0.1), 6 fresh seed pairs:", lines[0])
        self.assertIn(
            "The 95 % CI rules out VR being worse by more than 0.15 pp (so by the 1 pp "
            "margin) and a benefit of 1 pp or more. It does not rule out no effect at all.",
            lines[0],
        )
        self.assertIn("base 72.50 ± 1.87 %", lines[0])
        # two pairs only: still a number, marked partial; controls and paper arm appear
        runs = {k: v for k, v in runs.items() if v["seed"] < 2}
        self._write(d, "final", runs)
        shuffled = {f"s{i}": dict(self._run("vr_shuffled", 4096, i, 60.0 + i)) for i in range(2)}
        self._write(d, "controls", shuffled)
        paper = {
            "pb0": self._run("base", 4096, 0, 10.0, lr=0.8),
            "pv0": self._run("vr", 4096, 0, 55.0, lr=0.8),
            "pb1": self._run("base", 4096, 1, 10.0, lr=0.8),
            "pv1": self._run("vr", 4096, 1, 10.0, lr=0.8),
        }
        self._write(d, "paper", paper)
        lines = ev.headline(d)
        self.assertIn("(partial: 2 of 6 registered pairs)", lines[0])
        self.assertIn('"inconclusive"', lines[0])
        # VR 70.1, 70.8 vs shuffled 60, 61: +9.95
        self.assertIn("VR − VR-shuffled", lines[1])
        self.assertIn("+9.95 pp", lines[1])
        self.assertIn("VR-shuffled − base -10.00 pp", lines[1])  # 60, 61 against 70, 71
        self.assertIn(
            "rate 0.8), 2 pairs: collapse to < 20 % test accuracy base 2/2, VR 1/2", lines[2]
        )
