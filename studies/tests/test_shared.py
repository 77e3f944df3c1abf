"""studies/shared.py is the one definition of what the studies and the cost benchmarks share
(``studylib`` and ``benchmarks/harness.py`` name its objects, they do not copy them), and the
sweeps' training run (``sweeplib.train_run`` over ``studylib.Trainer``) restarts a seed exactly."""

import os
import sys
from unittest import mock

import numpy as np
import shared
import studylib
import sweeplib
import tensorflow as tf

import vrgd_tf


class SharedNamesTest(tf.test.TestCase):
    def test_studylib_names_are_shareds(self):
        for name in (
            "init_weights",
            "make_optimizer",
            "optimizer_classes",
            "read_json",
            "setup_devices",
            "strategy_for",
            "write_json",
        ):
            self.assertIs(getattr(studylib, name), getattr(shared, name), name)

    def test_one_run_record(self):
        import provenance

        # The studies' and the benchmarks' command and environment are shared's.
        self.assertIs(provenance.environment, shared.environment)
        self.assertIs(provenance.command_line, shared.command_line)
        env = shared.environment("vrgd_tf")
        self.assertEqual(
            list(env),
            ["python", "tensorflow", "keras", "numpy", "scipy", "vrgd_tf"]
            + ["platform", "host", "cpu_model", "cpu_count", "tf_onednn", "loadavg"],
        )
        self.assertIn(env["tf_onednn"], (True, False, None))
        self.assertEqual(env["vrgd_tf"], shared.dist_version("vrgd_tf"))
        self.assertIsNone(shared.dist_version("no-such-distribution-here"))
        # Files written before the records were one say loadavg_at_start.
        self.assertEqual(shared.load_average({"loadavg_at_start": [1.0]}), [1.0])
        self.assertEqual(shared.load_average({"loadavg": [2.0]}), [2.0])
        self.assertIsNone(shared.load_average(None))

    def test_command_line_says_python3(self):
        """The recorded command, rendered into the docs, is written as the docs write
        commands: ``python3`` (issue 36, new user: the docs mixed ``python`` and ``python3``)."""
        with mock.patch.object(sys, "argv", [os.path.join(shared.REPO, "a", "b.py"), "--x=1"]):
            self.assertEqual(shared.command_line(), "python3 a/b.py --x=1")

    def test_recorded_commands_are_shown_with_python3(self):
        """Records made before say ``python``; the reports load them as ``python3``."""
        record = {
            "command": "PYTHONPATH=/tmp/x python benchmarks/a.py --python=1",
            "earlier_commands": ["python b.py", "python3 c.py"],
            "history": [{"command": "python d.py", "note": "python e.py"}],
            "environment": {"python": "3.11.7"},
        }
        path = os.path.join(self.get_temp_dir(), "r.json")
        shared.write_json(path, record)
        self.assertEqual(
            shared.load_json(path),
            {
                "command": "PYTHONPATH=/tmp/x python3 benchmarks/a.py --python=1",
                "earlier_commands": ["python3 b.py", "python3 c.py"],
                "history": [{"command": "python3 d.py", "note": "python e.py"}],
                "environment": {"python": "3.11.7"},
            },
        )

    def test_the_four_pairs_and_an_unknown_one(self):
        import keras

        expected = {
            "momentum": (keras.optimizers.SGD, vrgd_tf.VRGDSGD),
            "adam": (keras.optimizers.Adam, vrgd_tf.VRGDAdam),
            "lamb": (vrgd_tf.Lamb, vrgd_tf.VRGDLamb),
            "lars": (vrgd_tf.Lars, vrgd_tf.VRGDLars),
        }
        for pair, classes in expected.items():
            self.assertEqual(shared.optimizer_classes(pair)[:2], classes, pair)
        vr = shared.make_optimizer("lamb", "vr", 0.01, gamma=0.2)
        self.assertEqual((vr.gamma, vr.weight_decay_rate), (0.2, 0.01))
        with self.assertRaisesRegex(ValueError, "unknown pair 'sgd'.*momentum, adam, lamb"):
            shared.optimizer_classes("sgd")


def _data(n=64, length=12, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, length, 1)).astype(np.float32)
    y = (x[:, :, 0].sum(1) > 0).astype(np.int32)
    return sweeplib.prepare_train_test({"x": x, "y": y, "x_test": x[:16], "y_test": y[:16]})


class TrainRunTest(tf.test.TestCase):
    def _run(self, trainer, build, data, seed):
        return sweeplib.train_run(
            trainer, build, data, seed=seed, batch=16, epochs=2, peak_lr=0.05, warmup_frac=0.1
        )

    def test_a_seed_run_again_gives_the_same_record(self):
        data = _data()

        def build():
            return shared.cnn1d(12, width=4)

        trainer = studylib.Trainer(
            shared.strategy_for(2), build, lambda s: shared.make_optimizer("momentum", "vr", s)
        )
        first = self._run(trainer, build, data, seed=3)
        self._run(trainer, build, data, seed=4)
        again = self._run(trainer, build, data, seed=3)
        self.assertEqual((first["steps"], first["warmup_steps"]), (8, 1))
        self.assertEqual([c["step"] for c in first["curve"]], [4, 8])
        self.assertLen(first["gsnr"], 2)
        self.assertLen(first["gsnr"][0]["stats"], 8)  # the CNN's 8 variables
        self.assertEqual(again["final"], first["final"])
        self.assertEqual(again["curve"], first["curve"])
        self.assertEqual(set(trainer.weight_cache), {3, 4})


if __name__ == "__main__":
    tf.test.main()
