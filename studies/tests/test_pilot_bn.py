"""The BatchNorm pilot (studies/evidence/PILOT_BN.md): the plan's edge rule and decision
(pilot_bn_plan.py) on hand-made runs, its report section, and its model."""

import os

import pilot_bn_plan as plan
import tensorflow as tf
from report import pilot_bn


def _run(batch, lr, val, collapsed=False):
    return {
        "batch": batch,
        "peak_lr": lr,
        "warmup_steps": 642 if batch == 256 else 208,
        "steps": 8560 if batch == 256 else 520,
        "final": {"val_acc": None if collapsed else val, "collapsed": collapsed},
        "curve": [{"epoch": 1, "val_acc": 10.0}, {"epoch": 2, "val_acc": val or 10.0}],
    }


def _runs(vals):
    """``{batch: {rate: val}}`` -> the runs dict of the results file."""
    return {plan.run_key(b, lr): _run(b, lr, v) for b, per in vals.items() for lr, v in per.items()}


INTERIOR = {
    256: {0.1: 90.0, 0.2: 91.5, 0.4: 91.0},
    4096: {0.4: 90.0, 0.8: 90.7, 1.6: 85.0},
}


class PilotPlanTest(tf.test.TestCase):
    def test_warmup_is_at_least_200_steps_and_3_epochs(self):
        self.assertEqual(plan.warmup_epochs(256, 55000), 3)  # 214 steps per epoch
        self.assertEqual(plan.warmup_epochs(4096, 55000), 16)  # 13 per epoch: 16 * 13 = 208

    def test_interior_best_needs_no_extension_and_ties_take_the_lower_rate(self):
        runs = _runs(INTERIOR)
        self.assertEqual(plan.grid(runs, 256), ([0.1, 0.2, 0.4], 0.2))
        self.assertEqual(plan.grid(runs, 4096), ([0.4, 0.8, 1.6], 0.8))
        runs[plan.run_key(256, 0.4)] = _run(256, 0.4, 91.5)
        self.assertEqual(plan.grid(runs, 256)[1], 0.2)

    def test_an_edge_best_extends_that_edge_once(self):
        vals = {4096: {0.4: 70.0, 0.8: 80.0, 1.6: 85.0}}
        runs = _runs(vals)
        self.assertEqual(plan.grid(runs, 4096), ([0.4, 0.8, 1.6, 3.2], None))
        runs.update(_runs({4096: {3.2: 86.0}}))  # still at the edge: no second extension
        self.assertEqual(plan.grid(runs, 4096), ([0.4, 0.8, 1.6, 3.2], 3.2))
        runs.update(_runs({256: {0.1: 91.0, 0.2: 90.0, 0.4: 89.0}}))  # low edge: 0.05 next
        self.assertEqual(plan.grid(runs, 256), ([0.05, 0.1, 0.2, 0.4], None))

    def test_decision_and_collapse_counts_zero(self):
        runs = _runs(INTERIOR)
        d = plan.decision(runs)
        self.assertEqual(d["best"], {256: (0.2, 91.5), 4096: (0.8, 90.7)})
        self.assertAllClose(d["gap_pp"], 0.8)
        self.assertTrue(d["converges"])
        runs[plan.run_key(4096, 0.8)] = _run(4096, 0.8, None, collapsed=True)
        self.assertIsNone(plan.decision(runs))  # 0.4 is now best, at the low edge
        self.assertEqual(plan.grid(runs, 4096), ([0.2, 0.4, 0.8, 1.6], None))
        runs.update(_runs({4096: {0.2: 89.0}}))
        d = plan.decision(runs)
        self.assertEqual(d["best"][4096], (0.4, 90.0))
        self.assertFalse(d["converges"])  # gap 1.5 pp
        del runs[plan.run_key(256, 0.4)]
        self.assertIsNone(plan.decision(runs))

    def test_runs_alternate_between_the_batches(self):
        runs, order = {}, []
        vals = {256: {0.1: 90.0, 0.2: 91.0, 0.4: 90.5}, 4096: {0.4: 85.0, 0.8: 88.0, 1.6: 87.0}}
        while (nxt := plan.next_run(runs)) is not None:
            order.append(nxt)
            runs.update(_runs({nxt[0]: {nxt[1]: vals[nxt[0]][nxt[1]]}}))
        self.assertEqual(
            order, [(4096, 0.4), (256, 0.1), (4096, 0.8), (256, 0.2), (4096, 1.6), (256, 0.4)]
        )


class PilotSectionTest(tf.test.TestCase):
    def _file(self, d, runs):
        import json

        with open(os.path.join(d, plan.FILE), "w") as f:
            json.dump({"runs": runs}, f)
        return d

    def test_section_reads_the_rule_and_writes_its_plot(self):
        import json

        d = self.get_temp_dir()
        with open(os.path.join(d, plan.FILE), "w") as f:
            json.dump({"runs": _runs(INTERIOR)}, f)
        text = pilot_bn.section(d, d, "img")
        self.assertIn("- Batch 256 (642 warm-up steps of 8560): 0.1 → 90.00, 0.2 → 91.50", text)
        self.assertIn("best 0.8.", text)
        self.assertIn("gap +0.80 pp, within the margin", text)
        self.assertNotIn("edge", text)
        self.assertTrue(os.path.exists(os.path.join(d, pilot_bn.PLOT)))
        edge = _runs({256: INTERIOR[256], 4096: {0.4: 88.0, 0.8: 89.0, 1.6: 90.0, 3.2: 90.2}})
        text = pilot_bn.section(self._file(d, edge), d, "img")
        self.assertIn("best 3.2 (at the grid's edge after the rule's one extension).", text)
        self.assertIn("Note: batch 4096's best is at its grid's top edge (the rule's one", text)
        runs = _runs({256: INTERIOR[256], 4096: {0.4: 80.0}})
        with open(os.path.join(d, plan.FILE), "w") as f:
            json.dump({"runs": runs}, f)
        text = pilot_bn.section(d, d, "img")
        self.assertIn("(in progress: 1 of 3 runs)", text)
        self.assertIn("Decision: pending", text)
        self.assertEqual(pilot_bn.section(self.get_temp_dir() + "/none", d, "img"), "")


class PilotModelTest(tf.test.TestCase):
    def test_batchnorm_cnn_parameters(self):
        import studylib

        model = studylib.fashion_cnn_bn()
        # convs 144 + 4608 + 13824 (no bias), BatchNorm gamma/beta 2 * (16 + 32 + 48),
        # dense 48 * 10 + 10; the moving statistics are non-trainable (2 * 96).
        trainable = sum(int(tf.size(v)) for v in model.trainable_variables)
        self.assertEqual(trainable, 144 + 4608 + 13824 + 192 + 490)
        self.assertEqual(sum(int(tf.size(v)) for v in model.non_trainable_variables), 192)
