"""A user's ``tf.function`` (AutoGraph on, the default) runs the library's code as written.

AutoGraph converts, statement by statement, whatever Python a ``tf.function`` calls, unless it
belongs to a package it leaves alone (TensorFlow, Keras, tf_keras). The entry points a custom
loop or Model Garden's trainer calls (``optimizer.apply``, tf_keras ``apply_gradients``, the
aggregator, ``variance_reduce``, ``apply_grouped_gradients``) could be converted, and with
them the ``logging`` module behind a warning issued while tracing (a stack dump of a test
that took 100 s instead of 2 s was in that conversion). A probe sees the difference: code
that AutoGraph converted runs from a generated file, not from the file it was written in.
The aggregator, ``variance_reduce`` and warning cases fail without the
``tf.autograph.experimental.do_not_convert`` on ``GSNRAggregator.__call__`` and
``variance_reduce``; the optimizers' cases fail without it on Keras 3 ``apply``, tf_keras
``apply_gradients`` and ``apply_grouped_gradients`` (they hand over to Keras' and tf_keras'
own, unconverted, code, but their own lines were converted).
"""

import logging
import sys
import traceback

import keras
import numpy as np
import tensorflow as tf

import vrgd_tf
from vrgd_tf import gsnr

import util

THIS_FILE = __file__


class Probe:
    """A factor transform and a log handler that note the file their code runs from."""

    def __init__(self):
        self.files = []
        self.converted = set()  # the converted functions on the stack (AutoGraph's tf__ names)

    def transform(self, factor, context):
        self.files.append(sys._getframe().f_code.co_filename)
        self.converted.update(
            f.name for f in traceback.extract_stack() if "__autograph_generated" in f.filename
        )
        return factor

    def handler(self):
        probe = self

        class Handler(logging.Handler):
            def emit(self, record):
                probe.files.append(sys._getframe().f_code.co_filename)

        return Handler()


GRADS = np.array([[1.0, 2.0, 3.0], [3.0, 1.0, 2.0]], np.float32)  # [replica, element]


def replica_grad():
    rid = tf.distribute.get_replica_context().replica_id_in_sync_group
    return tf.gather(tf.constant(GRADS), rid)


class EntryPointsTest(tf.test.TestCase):
    def run_steps(self, k, make, call):
        """``make()`` in the scope of ``k`` replicas gives ``(callee, variable)``; a
        ``tf.function`` calls ``call(callee, gradient, variable)`` in each replica."""
        strategy = util.strategy_for(k)
        with strategy.scope():
            callee, variable = make()

        @tf.function
        def step():
            strategy.run(lambda: call(callee, replica_grad(), variable))

        step()
        return variable

    def assert_as_written(self, probe):
        self.assertNotEmpty(probe.files)
        self.assertEqual(set(probe.files), {THIS_FILE})
        # Only this file's functions (the step and its call) are converted, not the
        # optimizers' entry points between them and the probe.
        entry_points = {"tf__apply", "tf__apply_gradients", "tf__apply_grouped_gradients"}
        self.assertEmpty(probe.converted & entry_points, probe.converted)

    def test_keras3_apply_and_apply_gradients(self):
        for method in ("apply", "apply_gradients"):
            probe = Probe()

            def make():
                variable = keras.Variable(np.zeros(3, np.float32), name="w")
                opt = vrgd_tf.VRGDSGD(0.1, factor_transforms=(probe.transform,))
                opt.build([variable])
                return opt, variable

            def call(opt, g, v, method=method):
                if method == "apply":
                    opt.apply([g], [v])
                else:
                    opt.apply_gradients([(g, v)])

            self.run_steps(2, make, call)
            self.assert_as_written(probe)

    def test_aggregator_and_variance_reduce(self):
        probe = Probe()

        def make():
            variable = tf.Variable(np.zeros(3, np.float32))
            aggregator = vrgd_tf.GSNRAggregator(factor_transforms=(probe.transform,))
            aggregator.build([variable])
            return aggregator, variable

        self.run_steps(2, make, lambda agg, g, v: v.assign_sub(agg([g], [v])[0]))
        self.assert_as_written(probe)

        probe = Probe()
        settings = vrgd_tf.settings.VRGDSettings(beta_3=0.0, factor_transforms=(probe.transform,))

        def reduce(_, g, v):  # no state: beta_3 = 0 and nothing recorded
            out = gsnr.variance_reduce(
                [g], [v], state=None, record_statistics=False, settings=settings
            )
            return v.assign_sub(out[0])

        self.run_steps(2, lambda: (None, tf.Variable(np.zeros(3, np.float32))), reduce)
        self.assert_as_written(probe)

    def test_a_warning_logged_while_tracing(self):
        """The aggregator on one replica warns, while tracing, that VRGD is inert."""
        probe = Probe()
        logger = logging.getLogger("vrgd_tf")
        handler = probe.handler()
        logger.addHandler(handler)
        try:

            def make():
                variable = tf.Variable(np.zeros(3, np.float32))
                return vrgd_tf.GSNRAggregator(), variable

            self.run_steps(1, make, lambda agg, g, v: v.assign_sub(agg([g], [v])[0]))
        finally:
            logger.removeHandler(handler)
        self.assert_as_written(probe)

    def test_tf_keras_apply_gradients_and_grouped(self):
        util.skip_without_tf_keras(self)
        from vrgd_tf import tf_keras as vtk

        for grouped in (False, True):
            probe = Probe()

            def make():
                variable = tf.Variable(np.zeros(3, np.float32))
                opt = vtk.VRGDSGD(0.1, factor_transforms=(probe.transform,))
                return opt, variable

            def call(opt, g, v, grouped=grouped):
                if grouped:
                    opt.apply_grouped_gradients([(2.0 * g, v)], [2.0 * g * g], num_groups=2)
                else:
                    opt.apply_gradients([(g, v)])

            self.run_steps(2, make, call)
            self.assert_as_written(probe)


if __name__ == "__main__":
    tf.test.main()
