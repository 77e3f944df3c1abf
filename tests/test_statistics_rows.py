"""Issue 36, new user: two ``vrgd_statistics()`` rows that misled (both tests failed before
the fixes).

1. With ``split_half=False`` every row still carries the four split-half fields
   (``reliability``, ``reliability_correlation``, ``reliability_pairs``,
   ``reliability_defined``), always 0/False. Fix: ``GSNRAggregator.statistics`` adds them only
   with ``split_half=True`` (as the JAX family's rows, which never have them).
2. ``model.train_on_batch`` under a strategy hands every replica the same batch: no element
   of any variable has a defined GSNR (the inert step, which the step's warning names), VRGD
   steps as its base, yet the row (``mean_gsnr 0, frac_at_one 1, mean_factor 1``) reads
   ``has_gsnr: True`` and enters the headline. Fix: ``has_gsnr(row)`` is False for a row
   without a defined GSNR, ``mean_gsnr == 0 and frac_at_one == 1`` (the test
   ``statistics()`` already makes for its inert warning), besides ``mean_factor == 0``. The
   step keeps recording that row: under XLA the reader's test is the only inert warning.
   (The JAX family records zeros on such a step, so its rows read False already.)
"""

import keras
import numpy as np
import tensorflow as tf

import vrgd_tf
from vrgd_tf.gsnr import SPLIT_HALF_FIELDS

import util


def _linear_model():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, name="dense")])
    model.compile(optimizer=vrgd_tf.VRGDSGD(0.1, statistics_interval=1), loss="mse")
    return model


def _data():
    x = np.random.RandomState(0).randn(64, 4).astype("float32")
    return x, x @ np.ones((4, 1), "float32")


class StatisticsRowsTest(tf.test.TestCase):
    def test_no_split_half_fields_without_split_half(self):
        variables = [tf.Variable(tf.zeros([5]), name="w")]
        aggregator = vrgd_tf.GSNRAggregator(split_half=False, statistics_interval=1)
        aggregator.build(variables)
        (row,) = aggregator.statistics().values()
        self.assertEmpty(set(SPLIT_HALF_FIELDS) & set(row))
        x, y = _data()
        with util.strategy_for(2).scope():
            model = _linear_model()
        model.fit(x, y, batch_size=32, verbose=0)
        for row in vrgd_tf.vrgd_statistics(model.optimizer).values():
            self.assertTrue(row["has_gsnr"])
            self.assertEmpty(set(SPLIT_HALF_FIELDS) & set(row))

    def test_train_on_batch_under_a_strategy_records_no_gsnr(self):
        x, y = _data()
        with util.strategy_for(2).scope():
            model = _linear_model()
        with self.assertLogs("vrgd_tf", level="WARNING") as logs:
            model.train_on_batch(x, y)
        self.assertTrue(any("no variable had a defined GSNR" in m for m in logs.output))
        stats = vrgd_tf.vrgd_statistics(model.optimizer)
        self.assertLen(stats, 2)
        for name, row in stats.items():
            self.assertFalse(row["has_gsnr"], name)
            self.assertEqual((row["mean_gsnr"], row["frac_at_one"]), (0.0, 1.0), name)
        self.assertEqual(vrgd_tf.summaries.headline(stats), {})
        # fit then feeds each replica its own shard: the rows have a GSNR again.
        model.fit(x, y, batch_size=32, verbose=0)
        stats = vrgd_tf.vrgd_statistics(model.optimizer)
        self.assertTrue(all(row["has_gsnr"] for row in stats.values()))
        self.assertGreater(stats["kernel"]["mean_gsnr"], 0.0)


if __name__ == "__main__":
    tf.test.main()
