"""The round-4 registered tuning rules (studies/evidence/protocol4.py): the grid centred on
the pilot's rate, the edge rule and its cap, the stability guard, the re-pilot stop and E2's
target, on hand-made tuning results."""

import protocol4 as p4
import tensorflow as tf


def runs_for(acc_by_arm, pair="momentum", seeds=p4.TUNE_SEEDS):
    """{arm: {lr: val_acc or [per seed]}} -> a tune.json runs dict."""
    runs = {}
    for arm, per in acc_by_arm.items():
        for lr, acc in per.items():
            accs = acc if isinstance(acc, list) else [acc] * len(seeds)
            for s, a in zip(seeds, accs):
                runs[p4.run_key(pair, arm, lr, s)] = {"final": {"val_acc": a}}
    return runs


def registered_grid(pair="momentum"):
    return p4.tune_grid({}, pair)[0]


class GridTest(tf.test.TestCase):
    def test_registered_grids(self):
        self.assertAllClose(
            registered_grid("momentum"),
            [3.2, 3.80546, 4.52548, 5.38174, 6.4, 7.61093, 9.05097, 10.7635, 12.8],
        )
        self.assertAllClose(registered_grid("lars")[::4], [5.0, 10.0, 20.0])
        self.assertEqual(p4.K, 16)

    def test_interior_choice_tie_lower(self):
        grid = registered_grid()
        peak = {lr: 90.0 - abs(i - 4) for i, lr in enumerate(grid)}
        tie = {lr: 90.0 if i in (3, 5) else 88.0 for i, lr in enumerate(grid)}
        c = p4.choose(runs_for({"base": peak, "vr": tie, "scalar_vr": peak}), "momentum")
        self.assertEqual(c["best"], {"base": grid[4], "vr": grid[3], "scalar_vr": grid[4]})
        self.assertEqual(c["guard_steps"], {"base": 0, "vr": 0, "scalar_vr": 0})
        self.assertFalse(c["repilot"])
        self.assertAlmostEqual(c["target_val_acc"], 89.5)

    def test_edge_extends_every_arm_and_cap_binds_at_eight(self):
        grid = registered_grid()
        rising = {lr: 60.0 + i for i, lr in enumerate(grid)}
        flat = {lr: 50.0 + (i == 4) for i, lr in enumerate(grid)}
        runs = runs_for({"base": rising, "vr": flat, "scalar_vr": flat})
        g, best = p4.tune_grid(runs, "momentum")
        self.assertIsNone(best)
        self.assertEqual(g, grid + [p4.rate(6.4, 5)])
        for i in range(5, 13):  # keep rising: eight extensions, then the cap binds
            lr = p4.rate(6.4, i)
            runs.update(
                runs_for({"base": {lr: 60.0 + i + 4}, "vr": {lr: 50.0}, "scalar_vr": {lr: 50.0}})
            )
        c = p4.choose(runs, "momentum")
        self.assertEqual(len(c["grid"]), 17)
        self.assertEqual(c["best"]["base"], p4.rate(6.4, 12))
        self.assertEqual(c["cap_binding"], ["base"])


class GuardTest(tf.test.TestCase):
    def test_a_collapse_at_the_next_higher_rate_steps_down(self):
        grid = registered_grid()
        peak = {lr: 90.0 - abs(i - 4) for i, lr in enumerate(grid)}
        vr = dict(peak)
        vr[grid[5]] = [89.0, 10.0, 89.0]  # a collapsed seed beside the best
        c = p4.choose(runs_for({"base": peak, "vr": vr, "scalar_vr": peak}), "momentum")
        self.assertEqual(c["best_before_guard"]["vr"], grid[4])
        self.assertEqual(c["best"]["vr"], grid[3])
        self.assertEqual(c["guard_steps"]["vr"], 1)

    def test_a_run_more_than_5pp_below_the_mean_steps_down_until_it_holds(self):
        grid = registered_grid()
        peak = {lr: 90.0 - abs(i - 4) for i, lr in enumerate(grid)}
        base = dict(peak)
        base[grid[4]] = [95.0, 95.0, 86.0]  # mean 92: 86 is 6 pp below
        base[grid[3]] = [91.0, 91.0, 83.0]  # mean 88.33: 83 is 5.33 pp below
        c = p4.choose(runs_for({"base": base, "vr": peak, "scalar_vr": peak}), "momentum")
        self.assertEqual(c["best"]["base"], grid[2])
        self.assertEqual(c["guard_steps"]["base"], 2)
        self.assertAlmostEqual(c["target_val_acc"], 88.0 - 0.5)

    def test_base_collapse_at_the_lowest_point_asks_for_a_repilot(self):
        grid = registered_grid()
        runs = runs_for({arm: {lr: 50.0 for lr in grid} for arm in p4.ARMS})
        for i in range(-5, -13, -1):  # the best keeps moving down to the capped edge
            lr = p4.rate(6.4, i)
            acc = [99.0, 99.0, 5.0] if i == -12 else 50.0 - i
            runs.update(runs_for({arm: {lr: acc} for arm in p4.ARMS}))
        c = p4.choose(runs, "momentum")
        self.assertEqual(c["best"]["base"], p4.rate(6.4, -12))
        self.assertEqual(c["cap_binding"], ["base", "scalar_vr", "vr"])
        self.assertTrue(c["repilot"])


class ReferenceTest(tf.test.TestCase):
    def test_reference_keys_and_seeds(self):
        self.assertEqual(p4.reference_key(100), "reference/b256/lr0.2/s100")
        self.assertEqual(p4.seeds("reference"), tuple(range(100, 108)))
        self.assertEqual(p4.seeds("final"), tuple(range(24)))
