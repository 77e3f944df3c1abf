"""benchmarks/variants.py: the ``sq`` arms send the squares through the library's own
collectives (``vrgd_tf.gsnr.collectives.all_reduce_samples``, no second copy of them) and
hand the base optimizer the plain sums of the gradients, dense and sparse."""

import os
import sys

import numpy as np
import tensorflow as tf

import util

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "benchmarks"))

import variants  # noqa: E402

K = 2


class SquaresArmTest(tf.test.TestCase):
    def test_sq_arms_return_the_plain_sums(self):
        rng = np.random.RandomState(0)
        dense = rng.randn(K, 3, 2).astype(np.float32)
        rows = rng.randn(K, 2, 4).astype(np.float32)
        strategy = util.strategy_for(K)

        def replica(squares_dtype):
            ctx = tf.distribute.get_replica_context()
            r = ctx.replica_id_in_sync_group
            grads = [
                tf.gather(dense, r),
                tf.IndexedSlices(tf.gather(rows, r), tf.constant([0, 3]), tf.constant([5, 4])),
            ]
            return variants._sum_as_vrgd(ctx, grads, squares_dtype)

        table = np.zeros([5, 4], np.float32)
        table[[0, 3]] = rows.sum(0)
        for squares_dtype in ("float32", "bfloat16"):
            out = strategy.run(tf.function(replica), args=(squares_dtype,))
            for value in strategy.experimental_local_results(out):
                self.assertAllClose(value[0], dense.sum(0), rtol=1e-6)
                self.assertAllClose(value[1], table, rtol=1e-6)
                self.assertEqual(value[1].shape, (5, 4))


if __name__ == "__main__":
    tf.test.main()
