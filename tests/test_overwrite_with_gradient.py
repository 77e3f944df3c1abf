"""An optimizer whose variables are all ``overwrite_with_gradient`` (float8 scales and amax
histories, e.g. a ``MultiOptimizer`` group) trains as its base on 2 replicas (issue 36,
fault 3). Before, ``apply`` raised a false "Keras 3.15.1 ... not supported" RuntimeError:
Keras assigns such variables directly and calls no aggregation."""

import keras
import numpy as np
import tensorflow as tf

import vrgd_tf

import util


class OverwriteWithGradientTest(tf.test.TestCase):
    def test_all_overwrite_variables_train_as_the_base(self):
        values = {}
        for name, make in (
            ("base", lambda: keras.optimizers.SGD(0.1)),
            ("vrgd", lambda: vrgd_tf.VRGDSGD(0.1, statistics_interval=1)),
        ):
            strategy = util.strategy_for(2)
            with strategy.scope():
                scale = keras.Variable(np.zeros(3, "float32"), name="scale")
                scale.overwrite_with_gradient = True
                optimizer = make()
                optimizer.build([scale])

            @tf.function
            def step():
                def replica_step():
                    ctx = tf.distribute.get_replica_context()
                    grad = tf.cast(ctx.replica_id_in_sync_group + 1, tf.float32) * tf.ones(3)
                    optimizer.apply([grad], [scale])

                strategy.run(replica_step)

            step()
            values[name] = (util.replica_values(scale), int(optimizer.iterations.numpy()))
        self.assertAllEqual(values["vrgd"][0], values["base"][0])
        self.assertEqual(values["vrgd"][1], values["base"][1])


if __name__ == "__main__":
    tf.test.main()
