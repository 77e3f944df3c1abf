"""GSNRLogger: VRGD's headline numbers in fit's progress bar, History and CSVLogger, read
only at recording steps, in both families (issue 22, item 1)."""

import contextlib
import csv
import glob
import io
import os
import tempfile

import keras
import numpy as np
import tensorflow as tf

import vrgd_tf
from vrgd_tf import summaries

import util

K = 2  # replicas (each replica is a thread to trace: 8 cost the suite a minute)


def data(steps, k=K, per_replica=4, seed=0):
    """``steps`` global batches of ``k * per_replica`` noisy linear-regression samples."""
    rng = np.random.RandomState(seed)
    n = steps * k * per_replica
    x = rng.randn(n, 6).astype(np.float32)
    y = (x @ rng.randn(6, 3) + 2.0 * rng.randn(n, 3)).astype(np.float32)
    return x, y, k * per_replica


def progbar_number(value):
    """A log value as both families' progress bars print it."""
    return f"{value:.4f}" if abs(value) > 1e-3 else f"{value:.4e}"


def count_reads(optimizer):
    """Wraps the optimizer's public ``vrgd_statistics`` to count the calls; returns the
    list the calls append to."""
    calls, read = [], optimizer.vrgd_statistics

    def counted():
        calls.append(int(optimizer.iterations.numpy()))
        return read()

    optimizer.vrgd_statistics = counted
    return calls


class Keras3LoggerTest(tf.test.TestCase):
    def fit(self, interval, steps, epochs, steps_per_execution=1, callbacks=(), k=2):
        x, y, batch = data(steps, k)
        with util.strategy_for(k).scope():
            model = keras.Sequential(
                [keras.Input((6,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(3)]
            )
            optimizer = vrgd_tf.VRGDLamb(learning_rate=1e-3, statistics_interval=interval)
            model.compile(optimizer=optimizer, loss="mse", steps_per_execution=steps_per_execution)
        reads = count_reads(optimizer)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            history = model.fit(
                x, y, batch_size=batch, epochs=epochs, verbose=2, shuffle=False,
                callbacks=[vrgd_tf.GSNRLogger(), *callbacks],
            )  # fmt: skip
        return model, history, out.getvalue(), reads

    def test_history_progress_bar_and_csv_show_the_last_recording_step(self):
        """2 replicas, 2 epochs of 7 steps, statistics every 3 steps (recorded at 3, 6, 9,
        12): History, CSVLogger, Keras' TensorBoard and the progress bar's epoch lines carry
        the headline of the last recording step; the statistics are read at the start and
        at those four steps only."""
        log_dir = tempfile.mkdtemp()
        csv_path = os.path.join(log_dir, "log.csv")
        model, history, printed, reads = self.fit(
            3,
            7,
            2,
            k=K,
            callbacks=[
                keras.callbacks.CSVLogger(csv_path),
                keras.callbacks.TensorBoard(os.path.join(log_dir, "tb")),
            ],
        )
        self.assertEqual(int(model.optimizer.iterations.numpy()), 14)
        self.assertEqual(reads, [0, 3, 6, 9, 12])
        want = summaries.headline(model.optimizer.vrgd_statistics())
        self.assertGreater(want["vrgd/median/mean_gsnr"], 0.0)
        self.assertBetween(want["vrgd/mean/mean_factor"], 0.1, 1.0)
        with open(csv_path) as f:
            rows = list(csv.DictReader(f))
        self.assertLen(rows, 2)
        for key in summaries.FIT_LOG_TAGS:
            self.assertLen(history.history[key], 2)
            self.assertEqual(history.history[key][-1], want[key], msg=key)
            self.assertAllClose(float(rows[-1][key]), want[key], rtol=1e-6, msg=key)
            self.assertIn(f"{key}: {progbar_number(want[key])}", printed.splitlines()[-1])
        self.assertNotEqual(
            history.history["vrgd/mean/mean_factor"][0], want["vrgd/mean/mean_factor"]
        )
        events = glob.glob(os.path.join(log_dir, "tb", "train", "events.out.tfevents.*"))
        self.assertLen(events, 1)
        tags = set()
        for record in tf.data.TFRecordDataset(events[0]):
            tags.update(v.tag for v in tf.compat.v1.Event.FromString(record.numpy()).summary.value)
        self.assertIn("epoch_vrgd/mean/mean_factor", tags)

    def test_steps_per_execution(self):
        """steps_per_execution=3, statistics every 2 steps, 12 steps: each of the 4 calls
        passes a recording step, so the statistics are read after steps 3, 6, 9 and 12."""
        model, history, _, reads = self.fit(2, 12, 1, steps_per_execution=3)
        self.assertEqual(int(model.optimizer.iterations.numpy()), 12)
        self.assertEqual(reads, [0, 3, 6, 9, 12])
        want = summaries.headline(model.optimizer.vrgd_statistics())
        for key in summaries.FIT_LOG_TAGS:
            self.assertEqual(history.history[key], [want[key]], msg=key)

    def test_before_the_first_recording_the_epoch_shows_nan(self):
        """statistics_interval beyond the epoch: the columns exist from the first epoch
        (CSVLogger fixes its columns then), NaN until a step records."""
        _, history, _, reads = self.fit(10, 4, 3)
        self.assertEqual(reads, [0, 10])
        values = history.history["vrgd/mean/mean_factor"]
        self.assertTrue(np.isnan(values[0]) and np.isnan(values[1]), values)
        self.assertBetween(values[2], 0.1, 1.0)

    def test_arguments_and_optimizers_are_checked(self):
        with self.assertRaisesRegex(ValueError, "`keys`.*vrgd/mean/nope"):
            vrgd_tf.GSNRLogger(keys=["vrgd/mean/nope"])
        with self.assertRaisesRegex(ValueError, "`keys`"):
            vrgd_tf.GSNRLogger(keys=[])
        self.assertEqual(
            vrgd_tf.GSNRLogger("vrgd/mean/frac_at_gamma").keys, ("vrgd/mean/frac_at_gamma",)
        )
        self.assertEqual(vrgd_tf.GSNRLogger(summaries.HEADLINE_TAGS).keys, summaries.HEADLINE_TAGS)
        x, y, _ = data(1)
        for optimizer, error, pattern in (
            (keras.optimizers.SGD(), TypeError, "GSNRLogger: .*SGD.*no VRGD optimizer"),
            (vrgd_tf.VRGDSGD(statistics_interval=0), ValueError, "statistics_interval` is 0"),
        ):
            model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(3)])
            model.compile(optimizer=optimizer, loss="mse")
            with self.assertRaisesRegex(error, pattern):
                model.fit(x, y, verbose=0, callbacks=[vrgd_tf.GSNRLogger()])
        # The reliability asked for from an optimizer that does not measure it.
        model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(3)])
        model.compile(optimizer=vrgd_tf.VRGDSGD(statistics_interval=1), loss="mse")
        with self.assertRaisesRegex(
            ValueError, "`keys` include 'vrgd/median/reliability'.*split_half=True"
        ):
            model.fit(x, y, verbose=0, callbacks=[vrgd_tf.GSNRLogger(summaries.HEADLINE_TAGS)])


class TfKerasLoggerTest(tf.test.TestCase):
    def test_history_and_progress_bar(self):
        """tf_keras on 2 replicas, steps_per_execution=2, statistics every 2 steps, 2
        epochs of 4 steps: History and the progress bar's epoch lines carry the headline of
        step 8; the statistics are read at the start and after steps 2, 4, 6, 8."""
        util.skip_without_tf_keras(self)
        import tf_keras

        from vrgd_tf import tf_keras as vtk

        x, y, batch = data(4, 2, seed=1)
        with util.strategy_for(2).scope():
            model = tf_keras.Sequential(
                [
                    tf_keras.Input((6,)),
                    tf_keras.layers.Dense(8, activation="tanh"),
                    tf_keras.layers.Dense(3),
                ]
            )
            optimizer = vtk.VRGDLamb(learning_rate=1e-3, statistics_interval=2)
            model.compile(optimizer=optimizer, loss="mse", steps_per_execution=2)
        reads = count_reads(optimizer)
        logger = vtk.GSNRLogger()
        self.assertIsInstance(logger, tf_keras.callbacks.Callback)
        self.assertEqual(
            (type(logger).__module__, type(logger).__qualname__), ("vrgd_tf.tf_keras", "GSNRLogger")
        )
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            history = model.fit(
                x, y, batch_size=batch, epochs=2, verbose=2, shuffle=False, callbacks=[logger]
            )
        self.assertEqual(int(optimizer.iterations.numpy()), 8)
        self.assertEqual(reads, [0, 2, 4, 6, 8])
        want = summaries.headline(optimizer.vrgd_statistics())
        self.assertGreater(want["vrgd/median/mean_gsnr"], 0.0)
        last_epoch = [line for line in out.getvalue().splitlines() if " - loss:" in line][-1]
        for key in summaries.FIT_LOG_TAGS:
            self.assertAllClose(history.history[key][-1], want[key], rtol=1e-6, msg=key)
            self.assertIn(f"{key}: {progbar_number(want[key])}", last_epoch)


if __name__ == "__main__":
    tf.test.main()
