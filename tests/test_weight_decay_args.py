"""One meaning of weight decay per class, and Keras' ``exclude_from_weight_decay()`` method.

Keras 3 Lamb/Lars (and their VRGD classes): the weight decay is ``weight_decay_rate``;
Keras' ``weight_decay`` is refused, and Keras' method adds to the exclusions that
``weight_decay_rate`` uses. Keras 3 SGD/Adam: Keras' ``weight_decay`` and method, unchanged.
tf_keras family: ``OptimizerV2`` refuses ``weight_decay`` (TypeError naming it).
"""

import logging

import keras
import numpy as np
import tensorflow as tf
from absl.testing import parameterized

from vrgd_tf import optimizers as k3
from vrgd_tf import tf_keras as vtk

LAYERWISE = [k3.Lamb, k3.VRGDLamb, k3.Lars, k3.VRGDLars]
LAMBS = [k3.Lamb, k3.VRGDLamb]


def variables(bias=1.0):
    return (
        keras.Variable(np.ones(3, np.float32), name="kernel"),
        keras.Variable(np.full(3, bias, np.float32), name="bias"),
    )


def kwargs_for(cls, **extra):
    """lr 0.1; LARS with eeta 0.1 so that its decay step is visible (w *= 1 - lr * eeta)."""
    base = dict(learning_rate=0.1, weight_decay_rate=0.1)
    if cls in (k3.Lars, k3.VRGDLars):
        base["eeta"] = 0.1
    return dict(base, **extra)


def decayed(cls):
    """A weight of 1 after one zero-gradient step with kwargs_for(cls): LAMB's update is
    wd * w with trust ratio ||w|| / ||wd * w||, so w -= lr * w; LARS's is lr * eeta * w."""
    return 0.9 if cls in LAMBS else 0.99


class WeightDecayArgumentTest(tf.test.TestCase, parameterized.TestCase):
    def setUp(self):
        super().setUp()
        logger = logging.getLogger("vrgd_tf")
        self.addCleanup(logger.setLevel, logger.level)  # (later tests listen on it)
        logger.setLevel(logging.ERROR)  # the one-replica warning

    @parameterized.parameters(*LAYERWISE)
    def test_keras_weight_decay_is_refused_naming_weight_decay_rate(self, cls):
        # Was accepted, and decayed the excluded bias from 1.0 to 0.99 in one step.
        with self.assertRaisesRegex(
            ValueError,
            r"(?s)`weight_decay`.*not supported.*"
            r"weight_decay=0\.1.*`weight_decay_rate`",
        ):
            cls(learning_rate=0.1, weight_decay=0.1, exclude_from_weight_decay=["bias"])

    @parameterized.product(cls=LAYERWISE, weight_decay=[None, 0.0])
    def test_no_keras_weight_decay_is_accepted(self, cls, weight_decay):
        kernel, bias = variables()
        opt = cls(learning_rate=0.1, weight_decay=weight_decay)
        opt.apply_gradients([(tf.zeros(3), kernel), (tf.zeros(3), bias)])
        self.assertAllEqual(kernel.numpy(), np.ones(3))
        self.assertEqual(opt.get_config()["weight_decay"], weight_decay)

    @parameterized.parameters(*LAYERWISE)
    def test_exclusion_argument_keeps_bias_undecayed(self, cls):
        kernel, bias = variables()
        opt = cls(**kwargs_for(cls, exclude_from_weight_decay=["bias"]))
        opt.apply_gradients([(tf.zeros(3), kernel), (tf.zeros(3), bias)])
        self.assertAllClose(kernel.numpy(), np.full(3, decayed(cls)), rtol=1e-6)
        self.assertAllEqual(bias.numpy(), np.ones(3))

    @parameterized.parameters(*LAYERWISE)
    def test_keras_method_by_name_adds_to_the_weight_decay_rate_exclusions(self, cls):
        # Was: TypeError "'NoneType' object is not callable" (the list shadowed the method).
        kernel, bias = variables()
        opt = cls(**kwargs_for(cls))
        opt.exclude_from_weight_decay(var_names=["bias"])
        opt.apply_gradients([(tf.zeros(3), kernel), (tf.zeros(3), bias)])
        self.assertAllClose(kernel.numpy(), np.full(3, decayed(cls)), rtol=1e-6)
        self.assertAllEqual(bias.numpy(), np.ones(3))
        self.assertEqual(opt.exclude_from_weight_decay_patterns, ["bias"])

    @parameterized.parameters(*LAYERWISE)
    def test_keras_method_by_variable(self, cls):
        kernel, bias = variables()
        other = keras.Variable(np.ones(3, np.float32), name="bias")  # same name, not listed
        opt = cls(**kwargs_for(cls))
        opt.exclude_from_weight_decay(var_list=[bias])
        opt.apply_gradients([(tf.zeros(3), v) for v in (kernel, bias, other)])
        self.assertAllEqual(bias.numpy(), np.ones(3))
        self.assertAllClose(other.numpy(), np.full(3, decayed(cls)), rtol=1e-6)
        self.assertIsNone(opt.get_config()["exclude_from_weight_decay"])

    @parameterized.parameters(*LAMBS)
    def test_method_exclusions_also_skip_layer_adaptation_when_it_is_none(self, cls):
        # Model Garden: exclude_from_layer_adaptation=None means the weight-decay list. With
        # w = 2 and g != 0 LAMB's first update is ~sign(g): ratio 1 moves the bias by lr,
        # the trust ratio ||w|| / ||update|| = 2 by 2 lr.
        for layer_adaptation, expected in ((None, 1.9), (["nothing"], 1.8)):
            kernel, bias = variables(bias=2.0)
            opt = cls(learning_rate=0.1, exclude_from_layer_adaptation=layer_adaptation)
            opt.exclude_from_weight_decay(var_names=["bias"])
            opt.apply_gradients([(tf.ones(3), kernel), (tf.ones(3), bias)])
            self.assertAllClose(
                bias.numpy(), np.full(3, expected), rtol=1e-5, msg=str(layer_adaptation)
            )

    @parameterized.parameters(*LAYERWISE)
    def test_keras_method_after_build_raises_like_keras(self, cls):
        kernel, bias = variables()
        opt = cls(**kwargs_for(cls))
        opt.build([kernel, bias])
        with self.assertRaisesRegex(
            ValueError, "can only be configured before the optimizer is built"
        ):
            opt.exclude_from_weight_decay(var_names=["bias"])

    def test_keras_method_checks_names(self):
        opt = k3.Lamb()
        with self.assertRaisesRegex(TypeError, "var_names.*bare string"):
            opt.exclude_from_weight_decay(var_names="bias")
        with self.assertRaisesRegex(ValueError, "var_names.*invalid regex"):
            opt.exclude_from_weight_decay(var_names=["("])

    @parameterized.parameters(*LAYERWISE)
    def test_config_round_trip_with_method_names(self, cls):
        opt = cls(**kwargs_for(cls, exclude_from_weight_decay=["LayerNorm"]))
        opt.exclude_from_weight_decay(var_names=["bias", "LayerNorm"])
        config = opt.get_config()
        self.assertEqual(config["exclude_from_weight_decay"], ["LayerNorm", "bias"])
        self.assertIsNone(config["exclude_from_layer_adaptation"])
        self.assertIsNone(config["weight_decay"])
        clone = cls.from_config(config)
        self.assertEqual(clone.get_config(), config)
        via_keras = keras.optimizers.deserialize(keras.optimizers.serialize(opt))
        self.assertIsInstance(via_keras, cls)
        self.assertEqual(via_keras.get_config(), config)
        kernel, bias = variables()
        clone.apply_gradients([(tf.zeros(3), kernel), (tf.zeros(3), bias)])
        self.assertAllEqual(bias.numpy(), np.ones(3))
        self.assertAllClose(kernel.numpy(), np.full(3, decayed(cls)), rtol=1e-6)

    @parameterized.parameters(
        (None, None, None, None),
        (["bias"], None, ["bias"], None),
        (["bias"], [], ["bias"], []),  # empty falls back, as in Model Garden
        (["bias"], ["bn"], ["bn"], ["bn"]),
        (None, ["bn"], ["bn"], ["bn"]),
    )
    def test_layer_adaptation_attribute_and_config(self, weight_decay, layer, effective, in_config):
        for cls in LAYERWISE:
            opt = cls(exclude_from_weight_decay=weight_decay, exclude_from_layer_adaptation=layer)
            self.assertEqual(opt.exclude_from_layer_adaptation, effective, cls.__name__)
            self.assertEqual(opt.exclude_from_weight_decay_patterns, weight_decay)
            config = opt.get_config()
            self.assertEqual(config["exclude_from_weight_decay"], weight_decay)
            self.assertEqual(config["exclude_from_layer_adaptation"], in_config)
            self.assertEqual(cls.from_config(config).get_config(), config)

    @parameterized.parameters(k3.VRGDSGD, k3.VRGDAdam)
    def test_keras_sgd_and_adam_keep_keras_weight_decay_and_method(self, cls):
        kernel, bias = variables()
        opt = cls(learning_rate=0.1, weight_decay=0.1)
        opt.exclude_from_weight_decay(var_names=["bias"])
        opt.apply_gradients([(tf.zeros(3), kernel), (tf.zeros(3), bias)])
        self.assertAllEqual(bias.numpy(), np.ones(3))
        self.assertAllClose(kernel.numpy(), np.full(3, 0.99), rtol=1e-6)  # w -= lr * wd * w

    @parameterized.parameters(vtk.VRGDLamb, vtk.VRGDLars, vtk.VRGDSGD, vtk.VRGDAdam)
    def test_tf_keras_family_refuses_weight_decay(self, cls):
        # OptimizerV2 takes no `weight_decay`; Model Garden's LAMB/LARS decay with
        # `weight_decay_rate` only.
        with self.assertRaisesRegex(TypeError, "weight_decay"):
            cls(learning_rate=0.1, weight_decay=0.1)

    @parameterized.parameters(vtk.VRGDLamb, vtk.VRGDLars)
    def test_tf_keras_exclusion_lists_stay_attributes(self, cls):
        opt = cls(weight_decay_rate=0.01, exclude_from_weight_decay=["bias"])
        self.assertEqual(opt.exclude_from_weight_decay, ["bias"])
        self.assertEqual(opt.exclude_from_layer_adaptation, ["bias"])
        config = opt.get_config()
        self.assertEqual(config["exclude_from_weight_decay"], ["bias"])
        self.assertEqual(cls.from_config(config).get_config(), config)


if __name__ == "__main__":
    tf.test.main()
