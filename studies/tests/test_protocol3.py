"""The round-3 registered tuning rules (studies/evidence/protocol3.py): the grid, the
choice on mean validation accuracy, the edge-extension rule and its cap."""

import protocol3 as p3
import tensorflow as tf


def runs_for(acc_by_arm, pair="momentum", seeds=p3.TUNE_SEEDS):
    """{arm: {lr: val_acc}} -> a tune.json runs dict (every seed the same accuracy)."""
    runs = {}
    for arm, per in acc_by_arm.items():
        for lr, acc in per.items():
            for s in seeds:
                runs[p3.run_key(pair, arm, lr, s)] = {"final": {"val_acc": acc}}
    return runs


class GridTest(tf.test.TestCase):
    def test_registered_grid(self):
        grid, best = p3.tune_grid({}, "momentum")
        self.assertIsNone(best)
        self.assertAllClose(
            grid,
            [0.0353553, 0.0420448, 0.05, 0.0594604, 0.0707107, 0.0840896, 0.1, 0.118921, 0.141421],
        )

    def test_interior_choice_and_tie_takes_lower_rate(self):
        grid, _ = p3.tune_grid({}, "momentum")
        peak = {lr: 70.0 - abs(i - 4) for i, lr in enumerate(grid)}
        tie = {lr: 70.0 if i in (3, 5) else 60.0 for i, lr in enumerate(grid)}
        runs = runs_for({"base": peak, "vr": tie, "scalar_vr": peak, "shuffled_nm": peak})
        g, best = p3.tune_grid(runs, "momentum")
        self.assertEqual(g, grid)
        self.assertEqual(best["base"], grid[4])
        self.assertEqual(best["vr"], grid[3])

    def test_edge_extends_every_arm_until_interior(self):
        grid, _ = p3.tune_grid({}, "momentum")
        rising = {lr: 60.0 + i for i, lr in enumerate(grid)}  # best at the top edge
        flat = {lr: 50.0 for lr in grid}
        runs = runs_for({"base": rising, "vr": flat, "scalar_vr": flat, "shuffled_nm": flat})
        g, best = p3.tune_grid(runs, "momentum")
        # base at the top edge: one point x 2**(1/4) for every arm; vr etc. tie -> the
        # lowest rate, the bottom edge: one point below too.
        self.assertEqual(g[0], p3.rate(0.05, -3))
        self.assertEqual(g[-1], p3.rate(0.05, 7))
        self.assertIsNone(best)
        new = {g[0]: 40.0, g[-1]: 10.0}
        runs.update(runs_for({a: new for a in p3.ARMS}))
        g, best = p3.tune_grid(runs, "momentum")
        self.assertLen(g, 11)
        self.assertEqual(best["base"], grid[-1])  # now interior
        self.assertEqual(best["vr"], grid[0])

    def test_cap_binds_after_four_points(self):
        """Base keeps improving downwards: the bottom edge grows one point at a time to
        i = -6 (4 points), then the cap binds and the edge rate is the choice; VR's best is
        the registered top point, so the top grows once (i = 7, worse) and stops."""
        grid = [p3.rate(0.05, i) for i in range(-6, 11)]
        falling = {lr: 90.0 - i for i, lr in enumerate(grid)}
        rising = {lr: 50.0 + i if i <= 12 else 10.0 for i, lr in enumerate(grid)}
        runs = runs_for({"base": falling, "vr": rising, "scalar_vr": rising,
                         "shuffled_nm": rising})  # fmt: skip
        g, best = p3.tune_grid(runs, "momentum")
        self.assertEqual(g, [p3.rate(0.05, i) for i in range(-6, 8)])
        self.assertEqual(best["base"], p3.rate(0.05, -6))
        self.assertEqual(best["vr"], p3.rate(0.05, 6))


if __name__ == "__main__":
    tf.test.main()
