"""Fast end-to-end test of ``examples/digits/digits_large_batch.py`` (tiny settings).

Runs the demo once (2 replicas, 2 epochs, global batch 64, a small MLP, LAMB and VR-LARS)
through :func:`digits_large_batch.run` and checks what it wrote and returned.
"""

import json
import os
import shutil
import tempfile

import numpy as np
import tensorflow as tf
from absl import flags
from absl.testing import flagsaver

from vrgd_tf import devices

import digits_large_batch as demo
import digits_reporting as reporting

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _numpy_logits(weights, x):
    """Forward pass of the demo's MLP from its weights, in NumPy (no Keras, no TF)."""
    h = np.asarray(x, np.float64)
    pairs = list(zip(weights[0::2], weights[1::2]))
    for i, (kernel, bias) in enumerate(pairs):
        h = h @ np.asarray(kernel, np.float64) + np.asarray(bias, np.float64)
        if i < len(pairs) - 1:
            h = np.maximum(h, 0.0)
    return h


class DigitsDemoTest(tf.test.TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.out_dir = tempfile.mkdtemp(prefix="digits_demo_")
        cls.config = demo.DemoConfig(
            replicas=2,
            global_batch=64,
            epochs=2,
            warmup_epochs=1,
            optimizers=("lamb", "vrgd_lars"),
            hidden_units=(32,),
            output_dir=cls.out_dir,
            keras_verbose=0,
        )
        cls.results = demo.run(cls.config)
        with open(os.path.join(cls.out_dir, demo.RESULTS_JSON)) as f:
            cls.payload = json.load(f)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.out_dir, ignore_errors=True)
        super().tearDownClass()

    def test_results_json_has_one_valid_row_per_optimizer(self):
        rows = self.payload["rows"]
        self.assertEqual([r["optimizer"] for r in rows], ["lamb", "vrgd_lars"])
        self.assertEqual(rows, self.results.rows)
        for row in rows:
            for key in ("train_accuracy", "test_accuracy"):
                self.assertBetween(row[key], 0.0, 1.0)
            self.assertEqual(
                row["generalization_gap"], row["train_accuracy"] - row["test_accuracy"]
            )
            self.assertGreater(row["wall_time_s"], 0.0)
            self.assertGreater(row["ms_per_step"], 0.0)
            self.assertLess(row["ms_per_step"] / 1000.0, row["wall_time_s"])
        self.assertEqual(
            self.payload["data"],
            {"num_train": 1297, "num_test": 500, "steps_per_epoch": 21, "per_replica_batch": 32},
        )

    def test_it_learns(self):
        # 42 steps of batch 64, far from converged, but above chance (10%). LARS, whose
        # relative step is lr * eeta = 0.5% per step, is the slow one at this length: its
        # accuracy here moves between about 0.2 and 0.33 with float rounding alone: the
        # GSNR step's output is bitwise that of the old flat buffer, but grappler
        # reassociates the LARS update lr * (factor * S1) of the biases differently in the
        # two graphs (1 ulp on 11 elements at the first step with lr > 0, 2e-5 relative after
        # 5 steps, then amplified over 42 steps at peak rate 5: 0.278 before, 0.198 after,
        # 0.244 for both with grappler off; tests/test_step_precision.py), so the bound is
        # chance plus a margin, and the loss must have fallen from log(10) at some epoch.
        # Since the step packs the small variables (vrgd_tf.gsnr.layout), the product is
        # taken once over the pack, so grappler no longer regroups it: 0.244 as with
        # grappler off, test losses 2.226 then 2.319 (with pack_limit=0, the same outputs
        # bit for bit: 0.198, losses 2.208 then 2.107); the last epoch's loss moves either
        # side of log(10) = 2.303 with the rounding alone.
        runs = {r.name: r for r in self.results.runs}
        self.assertGreater(runs["lamb"].test_accuracy, 0.6)
        self.assertGreater(runs["vrgd_lars"].test_accuracy, 0.15)
        self.assertLess(min(runs["vrgd_lars"].curves["test_loss"]), 2.25)

    def test_curves_have_one_point_per_epoch(self):
        for name, run in self.payload["runs"].items():
            for key in ("test_accuracy", "test_loss", "loss", "accuracy"):
                self.assertLen(run["curves"][key], self.config.epochs, f"{name} {key}")
            for value in run["curves"]["test_accuracy"]:
                self.assertBetween(value, 0.0, 1.0)
        final = {r.name: r for r in self.results.runs}
        for name, run in self.payload["runs"].items():
            self.assertEqual(run["curves"]["test_accuracy"][-1], final[name].test_accuracy)

    def test_png_is_written_and_valid(self):
        path = os.path.join(self.out_dir, demo.CURVES_PNG)
        self.assertEqual(path, self.results.plot_path)
        with open(path, "rb") as f:
            self.assertEqual(f.read(8), _PNG_SIGNATURE)
        import matplotlib.image  # pylint: disable=g-import-not-at-top

        image = matplotlib.image.imread(path)
        self.assertEqual(image.ndim, 3)
        self.assertGreater(image.shape[0], 100)
        self.assertGreater(image.shape[1], 100)

    def test_accuracies_match_an_independent_numpy_recomputation(self):
        data = self.results.data
        for run in self.results.runs:
            weights = run.model.get_weights()
            for x, y, reported in (
                (data.x_train, data.y_train, run.train_accuracy),
                (data.x_test, data.y_test, run.test_accuracy),
            ):
                predictions = np.argmax(_numpy_logits(weights, x), axis=1)
                # float64 vs float32 logits: allow one near-tie to flip.
                self.assertAllClose(
                    reported, np.mean(predictions == y), atol=1.0 / len(y), msg=run.name
                )

    def test_split_is_stratified_scaled_and_disjoint(self):
        data = self.results.data
        self.assertEqual(data.x_train.shape, (1297, 64))
        self.assertEqual(data.x_test.shape, (500, 64))
        self.assertEqual(data.x_train.min(), 0.0)
        self.assertEqual(data.x_train.max(), 1.0)
        self.assertAllEqual(np.unique(data.y_test), np.arange(10))
        # Stratified: each class's share of the test split is its share of all 1,797.
        all_labels = np.concatenate([data.y_train, data.y_test])
        expected = np.bincount(all_labels, minlength=10) * len(data.y_test) / len(all_labels)
        self.assertAllClose(np.bincount(data.y_test, minlength=10), expected, atol=1.0)
        self.assertLen(all_labels, 1797)
        again = demo.load_data(self.config.test_size, self.config.split_seed)
        self.assertAllEqual(again.x_test, data.x_test)
        self.assertAllEqual(again.y_train, data.y_train)

    def test_every_optimizer_starts_from_the_same_weights(self):
        shas = {r.name: r.initial_weights_sha256 for r in self.results.runs}
        self.assertLen(set(shas.values()), 1, shas)

    def test_vr_runs_report_factor_statistics(self):
        runs = {r.name: r for r in self.results.runs}
        self.assertIsNone(runs["lamb"].vrgd_statistics)
        stats = runs["vrgd_lars"].vrgd_statistics
        self.assertLen(stats, 4)  # 2 kernels + 2 biases
        for values in stats.values():
            self.assertBetween(values["frac_at_gamma"], 0.0, 1.0)
            self.assertBetween(values["frac_at_one"], 0.0, 1.0)
            self.assertGreaterEqual(values["mean_gsnr"], 0.0)
        summary = self.payload["runs"]["vrgd_lars"]["vrgd_statistics"]["all_weights"]
        self.assertBetween(summary["frac_at_gamma"], 0.0, 1.0)
        self.assertLen(
            self.payload["runs"]["vrgd_lars"]["curves"]["frac_at_gamma"], self.config.epochs
        )

    def test_table_lists_every_run(self):
        table = reporting.format_table(self.results.rows)
        self.assertIn("lamb", table)
        self.assertIn("vrgd_lars", table)
        self.assertLen(table.splitlines(), 2 + len(self.results.rows))

    def test_reuses_already_configured_logical_devices(self):
        self.assertLen(demo.configure_logical_cpus(2), 2)
        with self.assertRaisesRegex(ValueError, "--replicas=1000"):
            demo.configure_logical_cpus(1000)
        strategy = devices.cpu_strategy(2, argument="--replicas")
        self.assertEqual(strategy.num_replicas_in_sync, 2)
        self.assertIsInstance(
            strategy.extended._cross_device_ops, tf.distribute.ReductionToOneDevice
        )
        with self.assertRaisesRegex(ValueError, "--replicas"):
            devices.cpu_strategy(0, argument="--replicas")


class DemoConfigValidationTest(tf.test.TestCase):
    def test_bad_fields_raise_clear_errors(self):
        cases = [
            (dict(replicas=8, global_batch=100), "divisible by --replicas=8"),
            (dict(replicas=0), "--replicas"),
            (dict(optimizers=("lamb", "adamw")), "unknown name"),
            (dict(optimizers=("lamb", "lamb")), "twice"),
            (dict(optimizers=()), "at least one"),
            (dict(gamma=0.0), "--gamma"),
            (dict(epochs=5, warmup_epochs=5), "--warmup_epochs"),
            (dict(lamb_learning_rate=-1.0), "--lamb_learning_rate"),
            (dict(hidden_units=()), "--hidden_units"),
            (dict(replicas=True), "--replicas"),
            (dict(gamma=float("nan")), "--gamma"),
            (dict(lars_learning_rate=float("inf")), "--lars_learning_rate"),
            (dict(lars_eeta=-0.1), "--lars_eeta"),
            (dict(test_size=1698), "--test_size"),
            (dict(keras_verbose=3), "--keras_verbose"),
            (dict(backend="torch"), "--backend"),
        ]
        for kwargs, message in cases:
            with self.subTest(kwargs=kwargs):
                with self.assertRaisesRegex(ValueError, message):
                    demo.DemoConfig(**kwargs).validate()

    def test_backend_is_read_from_argv_before_keras(self):
        environ = {"KERAS_BACKEND": "jax", "XLA_FLAGS": "--xla_cpu_use_thunk_runtime=false"}
        self.assertEqual(demo.select_backend(["demo", "--epochs=2"], environ), "tensorflow")
        self.assertEqual(environ["KERAS_BACKEND"], "tensorflow")  # the flag wins
        self.assertEqual(environ["XLA_FLAGS"], "--xla_cpu_use_thunk_runtime=false")
        environ = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2 --xla_dump_to=/d"}
        argv = ["demo", "--backend", "jax", "--replicas=4"]
        self.assertEqual(demo.select_backend(argv, environ), "jax")
        self.assertEqual(
            environ,
            {
                "KERAS_BACKEND": "jax",
                "JAX_PLATFORMS": "cpu",
                "XLA_FLAGS": "--xla_dump_to=/d --xla_force_host_platform_device_count=4",
            },
        )

    def test_a_backend_other_than_the_loaded_one_is_refused(self):
        config = demo.DemoConfig(backend="jax", epochs=2, warmup_epochs=1)
        with self.assertRaisesRegex(ValueError, "--backend=jax, but Keras runs on tensorflow"):
            demo.run(config)

    def test_defaults_are_valid(self):
        config = demo.DemoConfig().validate()
        self.assertEqual(config.backend, "tensorflow")
        self.assertEqual(config.replicas, 8)
        self.assertEqual(config.global_batch, 1024)
        self.assertEqual(config.optimizers, ("lamb", "vrgd_lamb", "lars", "vrgd_lars"))

    def test_flag_validators(self):
        with flagsaver.flagsaver():
            with self.assertRaisesRegex(flags.IllegalFlagValueError, "divisible"):
                flags.FLAGS(["demo", "--replicas=8", "--global_batch=100"])
        with flagsaver.flagsaver():
            with self.assertRaises(flags.IllegalFlagValueError):
                flags.FLAGS(["demo", "--optimizers=lamb,sgd"])
        with flagsaver.flagsaver():
            with self.assertRaisesRegex(flags.IllegalFlagValueError, "--hidden_units"):
                flags.FLAGS(["demo", "--hidden_units=16,x"])
        with flagsaver.flagsaver():
            flags.FLAGS(
                [
                    "demo",
                    "--replicas=4",
                    "--global_batch=2048",
                    "--epochs=3",
                    "--warmup_epochs=1",
                    "--optimizers=lars,vrgd_lars",
                    "--hidden_units=16,8",
                ]
            )
            config = demo.config_from_flags()
            self.assertEqual(config.replicas, 4)
            self.assertEqual(config.global_batch, 2048)
            self.assertEqual(config.optimizers, ("lars", "vrgd_lars"))
            self.assertEqual(config.hidden_units, (16, 8))


if __name__ == "__main__":
    tf.test.main()


class DemoHelpTest(tf.test.TestCase):
    def test_help_lists_the_demo_flags_when_run_as_a_script(self):
        """Run as the README's command (the script is `__main__`, whose flags absl's help left
        out: --help, --helpshort and --helpfull listed none of them), from another directory:
        the script finds its sibling modules itself."""
        import subprocess
        import sys

        script = os.path.join(
            os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
            "examples",
            "digits",
            "digits_large_batch.py",
        )
        out = subprocess.run(
            [sys.executable, script, "--helpshort"],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tempfile.gettempdir(),
            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
        ).stdout
        for name in ("--epochs", "--global_batch", "--gamma", "--output_dir"):
            self.assertIn(name, out)
