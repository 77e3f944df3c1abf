"""Keras 3 ``MultiOptimizer`` holding VRGD optimizers: ``vrgd_statistics``, ``GSNRLogger``
and ``GSNRTensorBoard`` find every VRGD optimizer inside and label the rows by it (issue 35,
item 4). Before, each raised "no VRGD optimizer inside" and the callback aborted ``fit``."""

import contextlib
import glob
import io
import tempfile

import keras
import numpy as np
import tensorflow as tf

import vrgd_tf
from vrgd_tf import summaries

import util

K = 2  # replicas: two GSNR samples a step


def multi_model(make_second):
    """A two-layer model whose first layer trains with a ``VRGDSGD`` and whose second with
    ``make_second()`` (in ``MultiOptimizer``), on 2 replicas."""
    with util.strategy_for(K).scope():
        model = keras.Sequential(
            [
                keras.Input((6,)),
                keras.layers.Dense(4, activation="tanh", name="first"),
                keras.layers.Dense(3, name="second"),
            ]
        )
        sgd = vrgd_tf.VRGDSGD(learning_rate=0.05, statistics_interval=2, name="vr_sgd")
        second = make_second()

        def select(variable):
            return sgd if "/first/" in variable.path else second

        multi = keras.optimizers.MultiOptimizer(select)
        model.compile(optimizer=multi, loss="mse")
    return model, multi, sgd, second


def data(steps=4, per_replica=4):
    rng = np.random.default_rng(0)
    n = steps * K * per_replica
    return (
        rng.normal(size=(n, 6)).astype("float32"),
        rng.normal(size=(n, 3)).astype("float32"),
        K * per_replica,
    )


class MultiOptimizerTest(tf.test.TestCase):
    def test_statistics_and_logger_label_rows_by_the_optimizer(self):
        """Two VRGD optimizers inside: every row of each, keyed ``<optimizer>/<variable>``
        (equal to the inner optimizer's own rows); ``GSNRLogger`` logs the headline over
        them at the recording steps and ``GSNRTensorBoard`` writes events."""
        model, multi, sgd, adam = multi_model(
            lambda: vrgd_tf.VRGDAdam(learning_rate=1e-3, statistics_interval=3, name="vr_adam")
        )
        x, y, batch = data()
        log_dir = tempfile.mkdtemp()
        with contextlib.redirect_stdout(io.StringIO()):
            history = model.fit(
                x, y, batch_size=batch, epochs=1, verbose=2, shuffle=False,
                callbacks=[vrgd_tf.GSNRLogger(), vrgd_tf.GSNRTensorBoard(log_dir, update_freq=1)],
            )  # fmt: skip
        stats = vrgd_tf.vrgd_statistics(multi)
        expected = {f"vr_sgd/{n}": r for n, r in sgd.vrgd_statistics().items()}
        expected.update({f"vr_adam/{n}": r for n, r in adam.vrgd_statistics().items()})
        self.assertEqual(stats, expected)
        self.assertLen(stats, 4)  # two variables of each layer
        self.assertTrue(all(row["has_gsnr"] for row in stats.values()))
        group = summaries.unwrap_optimizer(multi)
        self.assertIsInstance(group, summaries.OptimizerGroup)
        self.assertEqual(group.statistics_interval, 1)  # gcd(2, 3): any recording step
        headline = summaries.headline(stats)
        self.assertNotEmpty(summaries.FIT_LOG_TAGS)
        for tag in summaries.FIT_LOG_TAGS:
            self.assertAllClose(history.history[tag][-1], headline[tag])
        self.assertNotEmpty(glob.glob(f"{log_dir}/**/events.out.tfevents.*", recursive=True))

    def test_one_vrgd_optimizer_beside_a_plain_one(self):
        """A plain Keras optimizer inside is left out; the VRGD one's rows keep its label."""
        model, multi, sgd, _ = multi_model(lambda: keras.optimizers.Adam(1e-3))
        x, y, batch = data()
        model.fit(x, y, batch_size=batch, epochs=1, verbose=0, callbacks=[vrgd_tf.GSNRLogger()])
        self.assertEqual(
            vrgd_tf.vrgd_statistics(multi),
            {f"vr_sgd/{n}": r for n, r in sgd.vrgd_statistics().items()},
        )


if __name__ == "__main__":
    tf.test.main()
