"""tf_keras VRGD optimizers against the same NumPy reference as the Keras 3 family."""

import numpy as np
import tensorflow as tf
import tf_keras
from absl.testing import parameterized
from official.modeling.optimization import lamb as mg_lamb
from official.modeling.optimization import lars as mg_lars

import numpy_reference as ref
import util
from test_keras_reference import make_problem
from vrgd_tf import tf_keras as vtk

OPTIMIZERS = {
    "sgd": (vtk.VRGDSGD, dict(learning_rate=0.1), lambda: ref.SGD(0.1), 0.0),
    "momentum": (vtk.VRGDSGD, dict(learning_rate=0.1, momentum=0.9, nesterov=True),
                 lambda: ref.SGD(0.1, 0.9, nesterov=True), 0.0),
    "adam": (vtk.VRGDAdam, dict(learning_rate=0.01), lambda: ref.Adam(0.01), 0.9),
    "lars": (vtk.VRGDLars, dict(learning_rate=0.5, momentum=0.9, weight_decay_rate=0.01,
                                eeta=0.01, exclude_from_weight_decay=["bias"]),
             lambda: ref.Lars(0.5, 0.9, 0.01, 0.01, exclude_from_weight_decay=["bias"]), 0.0),
    "lamb": (vtk.VRGDLamb, dict(learning_rate=0.01, weight_decay_rate=0.01,
                                exclude_from_weight_decay=["bias"]),
             lambda: ref.Lamb(0.01, weight_decay_rate=0.01,
                              exclude_from_weight_decay=["bias"]), 0.9),
}


def tf_variable(name, value):
    return tf.Variable(value, name=name)


class TfKerasReferenceTest(tf.test.TestCase, parameterized.TestCase):

    @parameterized.product(name=sorted(OPTIMIZERS), k=[1, 2, 4])
    def test_matches_numpy_reference(self, name, k):
        cls, kwargs, base, beta_3 = OPTIMIZERS[name]
        init, grads = make_problem(k, seed=10 + k)
        variables, opt = util.run_custom_loop(
            util.strategy_for(k), lambda: cls(gamma=0.1, **kwargs), init, grads,
            make_variable=tf_variable)
        expected = util.numpy_run(ref.VRGD(base(), 0.1, beta_3), init, grads)
        for n in init:
            self.assertAllClose(variables[n].numpy(), expected[n], atol=1e-5, rtol=1e-5)
        for var in list(variables.values()) + list(opt.weights):
            copies = util.replica_values(var)
            for c in copies[1:]:
                np.testing.assert_array_equal(c, copies[0], err_msg=var.name)

    @parameterized.parameters(
        ("lamb", mg_lamb.LAMB, dict(learning_rate=0.01, weight_decay_rate=0.01,
                                    exclude_from_weight_decay=["bias"],
                                    exclude_from_layer_adaptation=["nothing"])),
        ("lars", mg_lars.LARS, dict(learning_rate=0.5, momentum=0.9, weight_decay_rate=0.01,
                                    eeta=0.01, exclude_from_weight_decay=["bias"])),
        ("sgd", tf_keras.optimizers.legacy.SGD, dict(learning_rate=0.1, momentum=0.9)),
        ("adam", tf_keras.optimizers.legacy.Adam, dict(learning_rate=0.01)),
    )
    def test_gamma_one_equals_model_garden(self, name, base_cls, kwargs):
        cls = OPTIMIZERS[name][0]
        init, grads = make_problem(4, seed=3)
        strategy = util.strategy_for(4)
        vr_vars, _ = util.run_custom_loop(strategy, lambda: cls(gamma=1.0, beta_3=0.0, **kwargs),
                                          init, grads, make_variable=tf_variable)
        base_vars, _ = util.run_custom_loop(strategy, lambda: base_cls(**kwargs), init, grads,
                                            make_variable=tf_variable)
        for n in init:
            self.assertAllClose(vr_vars[n].numpy(), base_vars[n].numpy(), atol=1e-6, rtol=0)


if __name__ == "__main__":
    tf.test.main()
