"""Default optimizer names follow each family's Keras convention (issue 36, fault 4).

Keras 3 names an optimizer made without ``name=`` after its class in snake case, made unique
in the process (``SGD``: "sgd", "sgd_1", ...); tf_keras' legacy optimizers take their class
name ("SGD" for every instance). The VRGD classes did the latter in both families.
"""

import inspect

import keras
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


if __name__ == "__main__":
    tf.test.main()
