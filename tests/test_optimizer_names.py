"""Default optimizer names follow each family's Keras convention (issue 36, fault 4).

Keras 3 names an optimizer made without ``name=`` after its class in snake case, made unique
in the process (``SGD``: "sgd", "sgd_1", ...); tf_keras' legacy optimizers take their class
name ("SGD" for every instance). The VRGD classes did the latter in both families.
"""

import inspect

import keras
import numpy as np
import tensorflow as tf

import vrgd_tf
from vrgd_tf import optimizers as k3

import util


class KerasThreeNamesTest(tf.test.TestCase):
    def test_default_name_is_the_snake_case_class_name_made_unique(self):
        for cls, stem in (
            (vrgd_tf.VRGDSGD, "vrgdsgd"),
            (vrgd_tf.VRGDAdam, "vrgd_adam"),
            (vrgd_tf.VRGDLars, "vrgd_lars"),
            (vrgd_tf.VRGDLamb, "vrgd_lamb"),
            (k3.Lamb, "lamb"),
            (k3.Lars, "lars"),
        ):
            first, second = cls(), cls()
            self.assertRegex(first.name, rf"^{stem}(_\d+)?$")
            self.assertRegex(second.name, rf"^{stem}_\d+$")
            self.assertNotEqual(first.name, second.name)
            self.assertIsNone(inspect.signature(cls).parameters["name"].default, cls)
        # As Keras' own: the same stem rule.
        self.assertRegex(keras.optimizers.SGD().name, r"^sgd(_\d+)?$")

    def test_a_made_class_and_an_explicit_name(self):
        cls = k3.make_vrgd_optimizer(keras.optimizers.AdamW, register=False)
        self.assertRegex(cls().name, r"^vrgd_adam_w(_\d+)?$")
        self.assertEqual(vrgd_tf.VRGDLamb(name="outer").name, "outer")
        # The config carries the instance's name, and from_config keeps it.
        opt = vrgd_tf.VRGDSGD(0.1)
        self.assertEqual(vrgd_tf.VRGDSGD.from_config(opt.get_config()).name, opt.name)


class TfKerasNamesTest(tf.test.TestCase):
    def test_default_name_is_the_class_name(self):
        if not util.HAS_TF_KERAS:
            self.skipTest("tf_keras is not installed")
        import tf_keras

        from vrgd_tf import tf_keras as vtk

        self.assertEqual(tf_keras.optimizers.legacy.SGD()._name, "SGD")
        for cls in (vtk.VRGDSGD, vtk.VRGDAdam, vtk.VRGDLars, vtk.VRGDLamb):
            self.assertEqual([cls()._name, cls()._name], [cls.__name__] * 2)
            self.assertEqual(inspect.signature(cls).parameters["name"].default, cls.__name__)


class NameIndependentSumsTest(tf.test.TestCase):
    """``gamma=1, beta_3=0`` is the base bit for bit whatever the optimizer's name.

    Under ``ReductionToOneDevice`` graph rewrites order an ``AddN``'s operands by node name;
    replica 0's operand went last whenever the optimizer's name sorted after "replica_"
    ("sgd", "x", Keras' default "vrgdsgd"), which moved 7 of 12 weights by 1 ulp from
    ``SGD``'s (found when the default name changed). Fails before the operands were named
    by replica (``vrgd_tf.gsnr.collectives.in_replica_order``)."""

    def _run(self, make_optimizer, make_variable=None):
        """Weights (replica 0's copy) after 3 steps of 4 replicas' known gradients."""
        init, grads = util.make_problem(4, seed=3, steps=3)
        kw = {} if make_variable is None else {"make_variable": make_variable}
        out, _ = util.run_custom_loop(util.strategy_for(4), make_optimizer, init, grads, **kw)
        return {n: util.replica_values(v)[0] for n, v in out.items()}

    def _assert_base(self, make_vr, plain, make_variable=None):
        """``make_vr``'s run gives ``plain`` (the base's weights, :meth:`_run`) bit for bit."""
        vr = self._run(make_vr, make_variable)
        for n in plain:
            np.testing.assert_array_equal(vr[n], plain[n])

    def test_keras3_any_name(self):
        # The base's run does not depend on the VRGD optimizer's name: one run for all. Every
        # name sorts after "replica_", so each is the same case of the fault; the default name
        # with either squares dtype, the explicit names with one each (the suite's time,
        # issue 36).
        plain = self._run(lambda: keras.optimizers.SGD(learning_rate=0.1, momentum=0.9))
        for name, squares in (
            (None, "float32"),
            (None, "bfloat16"),
            ("sgd", "bfloat16"),
            ("x", "float32"),
        ):
            with self.subTest(name=name, squares=squares):
                self._assert_base(
                    lambda: vrgd_tf.VRGDSGD(
                        learning_rate=0.1,
                        momentum=0.9,
                        gamma=1.0,
                        beta_3=0.0,
                        squares_dtype=squares,
                        name=name,
                    ),
                    plain,
                )

    def test_tf_keras_any_name(self):
        if not util.HAS_TF_KERAS:
            self.skipTest("tf_keras is not installed")
        import tf_keras

        from vrgd_tf import tf_keras as vtk

        mk = lambda n, v: tf.Variable(v, name=n)  # noqa: E731
        plain = self._run(lambda: tf_keras.optimizers.legacy.SGD(learning_rate=0.1), mk)
        self._assert_base(lambda: vtk.VRGDSGD(learning_rate=0.1, gamma=1.0, name="x"), plain, mk)


if __name__ == "__main__":
    tf.test.main()
