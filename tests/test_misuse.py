"""Misuses that used to train wrongly in silence or fail with a cryptic error; each now
raises or warns with the fix (issue 18, faults 5, 6 and 7)."""

import keras
import tensorflow as tf
from absl.testing import parameterized

import vrgd_tf

import util


class VRGDAsBaseTest(tf.test.TestCase, parameterized.TestCase):
    """``make_vrgd_optimizer`` of a VRGD class: a message naming its base, not a bare MRO
    ``TypeError``."""

    def test_keras3(self):
        with self.assertRaisesRegex(TypeError, r"VRGDLamb` is already a VRGD.*vrgd_tf\..*Lamb"):
            vrgd_tf.make_vrgd_optimizer(vrgd_tf.VRGDLamb)
        subclass = type("MyVRGDAdam", (vrgd_tf.VRGDAdam,), {})
        with self.assertRaisesRegex(TypeError, r"MyVRGDAdam` is already a VRGD.*Adam"):
            vrgd_tf.make_vrgd_optimizer(subclass)
        # A plain class still works.
        made = vrgd_tf.make_vrgd_optimizer(keras.optimizers.Lion, register=False)
        self.assertTrue(issubclass(made, keras.optimizers.Lion))

    def test_tf_keras(self):
        util.skip_without_tf_keras(self)
        from vrgd_tf import tf_keras as vtk

        with self.assertRaisesRegex(TypeError, r"VRGDLars` is already a VRGD.*lars\.LARS"):
            vtk.make_vrgd_optimizer(vtk.VRGDLars)


if __name__ == "__main__":
    tf.test.main()
