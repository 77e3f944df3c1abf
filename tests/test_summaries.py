"""GSNR diagnostics: the callback writes the optimizer's statistics to TensorBoard."""

import glob
import os
import tempfile

import keras
import numpy as np
import tensorflow as tf

import numpy_reference as ref
import util
import vrgd_tf


class SummariesTest(tf.test.TestCase):

    def test_callback_writes_reference_statistics(self):
        k, n = 4, 32
        rng = np.random.RandomState(0)
        x = rng.randn(n, 5).astype(np.float32)
        y = (x @ rng.randn(5, 2) + 2 * rng.randn(n, 2)).astype(np.float32)
        strategy = util.strategy_for(k)
        with strategy.scope():
            model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(2, name="d")],
                                     name="net")
            model.compile(optimizer=vrgd_tf.VRGDSGD(learning_rate=0.0), loss="mse")
        w = model.layers[0].kernel.numpy().astype(np.float64)
        log_dir = tempfile.mkdtemp()
        cb = vrgd_tf.GSNRTensorBoard(log_dir, update_freq=1, log_to_history=True)
        hist = model.fit(x, y, batch_size=n, epochs=1, verbose=0, callbacks=[cb], shuffle=False)

        b = n // k
        gk = [2.0 / (b * 2) / k * x[d * b:(d + 1) * b].T
              @ (x[d * b:(d + 1) * b] @ w - y[d * b:(d + 1) * b]) for d in range(k)]
        mu, at_gamma, at_one = ref.gsnr_statistics(np.stack(gk), 0.1)
        stats = model.optimizer.vrgd_statistics()
        kernel = [s for name, s in stats.items() if name.endswith("kernel")][0]
        self.assertAllClose([kernel["mean_gsnr"], kernel["frac_at_gamma"],
                             kernel["frac_at_one"]], [mu, at_gamma, at_one], rtol=1e-4)
        self.assertIn("vrgd/mean/mean_gsnr", hist.history)

        events = glob.glob(os.path.join(log_dir, "events.out.tfevents.*"))
        self.assertLen(events, 1)
        tags = set()
        for record in tf.data.TFRecordDataset(events[0]):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for v in event.summary.value:
                tags.add(v.tag)
        self.assertIn("vrgd/net/d/kernel/mean_gsnr", tags)
        self.assertIn("vrgd/hist/frac_at_gamma", tags)

    def test_update_freq_checked(self):
        with self.assertRaisesRegex(ValueError, "update_freq"):
            vrgd_tf.GSNRTensorBoard("/tmp/x", update_freq=0)


if __name__ == "__main__":
    tf.test.main()
