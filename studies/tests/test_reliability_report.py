"""The split-half reliability section (studies/report/reliability.py) on a tiny synthetic
results file with hand-computed means, and the runner's record of the demo's results
(studies/evidence/reliability.py: ``demo_record``)."""

import json
import os

import reliability as runner
import tensorflow as tf
from report import reliability


def _row(rel, rho, factor, defined=True, pairs=20):
    return {
        "mean_factor": factor,
        "reliability": rel if defined else 0.0,
        "reliability_correlation": rho if defined else 0.0,
        "reliability_pairs": pairs,
        "reliability_defined": defined,
    }


def _run():
    """Six epochs (thirds of 2) of two variables; ``b`` undefined in epochs 3 and 4."""
    rel_a = [0.9, 0.7, 0.5, 0.3, 0.1, -0.1]
    rel_b = [0.6, 0.4, 0.0, 0.0, -0.2, -0.4]
    diag = [
        {
            "epoch": e + 1,
            "stats": {
                "conv/kernel": _row(rel_a[e], rel_a[e] / 2, 0.5),
                "conv/bias": _row(rel_b[e], rel_b[e] / 2, 0.25 * (e + 1), defined=e not in (2, 3)),
            },
        }
        for e in range(6)
    ]
    return {
        "pair": "momentum",
        "peak_lr": 0.05,
        "lr_choice": "test rate",
        "seed": 0,
        "epochs": 6,
        "steps": 12,
        "layout": "replicas",
        "curve": [{"epoch": 6, "val_acc": 80.0}],
        "diagnostics": diag,
        "wall_s": 1.0,
        "load_average": [0.5, 0.5, 0.5],
    }


def _demo_results():
    """A digits demo ``results.json`` of one VR run (its format: examples/digits)."""
    return {
        "config": {"replicas": 8, "global_batch": 1024, "epochs": 3, "seed": 0},
        "runs": {
            "vrgd_lamb": {
                "peak_learning_rate": 0.03,
                "curves": {"reliability": [0.6, 0.3, -0.1], "test_accuracy": [0.5, 0.8, 0.9]},
                "vrgd_statistics": {
                    "per_variable": {"dense/kernel": dict(_row(0.2, 0.1, 0.4), mean_gsnr=1.0)},
                    "all_weights": {},
                },
            }
        },
    }


class ReliabilityReportTest(tf.test.TestCase):
    def test_thirds(self):
        self.assertEqual(
            reliability.thirds(30), [("early", 0, 10), ("mid", 10, 20), ("late", 20, 30)]
        )
        self.assertEqual(reliability.thirds(2), [("early", 0, 1), ("late", 1, 2)])

    def test_means_by_hand(self):
        run = _run()
        a = reliability.bucket_means(reliability.variable_series(run, "conv/kernel", "reliability"))
        self.assertAllClose([a["early"], a["mid"], a["late"]], [0.8, 0.4, 0.0])
        b = reliability.bucket_means(reliability.variable_series(run, "conv/bias", "reliability"))
        self.assertAllClose([b["early"], b["late"]], [0.5, -0.3])
        self.assertIsNone(b["mid"])  # undefined in both of its epochs
        f = reliability.bucket_means(reliability.variable_series(run, "conv/bias", "mean_factor"))
        self.assertAllClose(f["mid"], 0.875)  # the factor counts where the reliability is undefined
        # Median over the defined variables: epochs 3, 4 have only conv/kernel.
        self.assertAllClose(reliability.median_series(run), [0.75, 0.55, 0.5, 0.3, -0.05, -0.25])

    def test_section(self):
        demo = runner.demo_record(_demo_results())
        self.assertEqual(demo["runs"]["vrgd_lamb"]["median_reliability"], [0.6, 0.3, -0.1])
        row = demo["runs"]["vrgd_lamb"]["last_step"]["dense/kernel"]
        self.assertEqual(sorted(row), sorted(runner.DEMO_FIELDS))
        demo["command"] = "examples/digits/digits_large_batch.py --optimizers=vrgd_lamb"
        tmp = self.get_temp_dir()
        with open(os.path.join(tmp, reliability.FILE), "w") as f:
            json.dump({"runs": {"k": _run()}, "demo": demo}, f)
        images = os.path.join(tmp, "images")
        text = reliability.section(tmp, images, "images")
        self.assertIn(reliability.HEADING, text)
        self.assertIn("| `conv/kernel` | 20 | 0.80 (0.40) | 0.40 (0.20) | 0.00 (0.00) |", text)
        self.assertIn("| `conv/bias` | 20 | 0.50 (0.25) | undefined (undefined) |", text)
        self.assertIn("| VR-LAMB | 0.60 | 0.30 | -0.10 | `dense/kernel` 0.20 |", text)
        self.assertIn("VR-Momentum 0.65 -> 0.40 -> -0.15", text)
        self.assertTrue(os.path.exists(os.path.join(images, reliability.PLOT)))

    def test_no_results_no_section(self):
        self.assertEqual(reliability.section(self.get_temp_dir(), "unused", "unused"), "")


if __name__ == "__main__":
    tf.test.main()
