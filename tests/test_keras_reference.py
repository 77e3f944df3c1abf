"""Keras 3 VRGD optimizers against the independent NumPy reference, under 1, 2 and 4 replicas."""

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

import numpy_reference as ref
import util
import vrgd_tf

STEPS = 3
SHAPES = {"kernel": (4, 3), "bias": (3,)}

# name -> (vrgd_tf class, kwargs, NumPy base factory, default beta_3)
OPTIMIZERS = {
    "sgd": (vrgd_tf.VRGDSGD, dict(learning_rate=0.1),
            lambda: ref.SGD(0.1), 0.0),
    "momentum": (vrgd_tf.VRGDSGD, dict(learning_rate=0.1, momentum=0.9, nesterov=True),
                 lambda: ref.SGD(0.1, 0.9, nesterov=True), 0.0),
    "adam": (vrgd_tf.VRGDAdam, dict(learning_rate=0.01),
             lambda: ref.Adam(0.01), 0.9),
    "lars": (vrgd_tf.VRGDLars, dict(learning_rate=0.5, momentum=0.9, weight_decay_rate=0.01,
                                     eeta=0.01, exclude_from_weight_decay=["bias"]),
             lambda: ref.Lars(0.5, 0.9, 0.01, 0.01, exclude_from_weight_decay=["bias"]), 0.0),
    "lamb": (vrgd_tf.VRGDLamb, dict(learning_rate=0.01, weight_decay_rate=0.01,
                                     exclude_from_weight_decay=["bias"]),
             lambda: ref.Lamb(0.01, weight_decay_rate=0.01,
                              exclude_from_weight_decay=["bias"]), 0.9),
}


def make_problem(k, seed=0, steps=STEPS):
    """Initial weights and per-replica gradients whose GSNR spans 1e-3 to about 30.

    The spread across replicas is standardised, so the GSNR is set by design and stays in
    the range where float32 resolves the variance to ~1e-6 (the float32 limits are tested
    separately in test_numerics.py).
    """
    rng = np.random.RandomState(seed)
    init = {n: rng.randn(*s).astype(np.float32) for n, s in SHAPES.items()}
    grads = {}
    for n, s in SHAPES.items():
        signal = np.clip(rng.randn(*s), -2.0, 2.0)
        noise_scale = np.exp(rng.uniform(-1.0, 2.0, size=s))
        noise = rng.randn(steps, k, *s)
        if k > 1:
            noise = (noise - noise.mean(1, keepdims=True)) / noise.std(1, keepdims=True)
        g = signal + noise_scale * noise
        grads[n] = (g / k).astype(np.float32)  # as Keras: loss averaged over global batch
    return init, grads


class KerasReferenceTest(tf.test.TestCase, parameterized.TestCase):

    @parameterized.product(name=sorted(OPTIMIZERS), k=[1, 2, 4])
    def test_matches_numpy_reference(self, name, k):
        cls, kwargs, base, beta_3 = OPTIMIZERS[name]
        init, grads = make_problem(k, seed=k)
        variables, opt = util.run_custom_loop(
            util.strategy_for(k), lambda: cls(gamma=0.1, **kwargs), init, grads)
        self.assertEqual(opt.beta_3, beta_3)
        expected = util.numpy_run(ref.VRGD(base(), 0.1, beta_3), init, grads)
        for n in init:
            self.assertAllClose(variables[n].numpy(), expected[n], atol=1e-5, rtol=1e-5)
        if k > 1:  # the factor must have bitten, or this test proves nothing
            vr = ref.VRGD(base(), 0.1, beta_3)
            util.numpy_run(vr, init, grads)
            self.assertLess(vr.factors["kernel"].min(), 0.5)
        # every replica copy of every model and optimizer variable is bitwise equal
        for var in list(variables.values()) + list(opt.variables):
            copies = util.replica_values(var)
            self.assertLen(copies, k, msg=var.name)
            for c in copies[1:]:
                np.testing.assert_array_equal(c, copies[0], err_msg=var.name)

    @parameterized.parameters(sorted(OPTIMIZERS))
    def test_gamma_one_equals_base_keras_optimizer(self, name):
        """gamma=1, beta_3=0: bitwise the base Keras 3 optimizer under 4 replicas."""
        cls, kwargs, _, _ = OPTIMIZERS[name]
        base_cls = cls._vrgd_base_class
        init, grads = make_problem(4, seed=7)
        strategy = util.strategy_for(4)
        vr_vars, _ = util.run_custom_loop(strategy, lambda: cls(gamma=1.0, beta_3=0.0, **kwargs),
                                          init, grads)
        base_vars, _ = util.run_custom_loop(strategy, lambda: base_cls(**kwargs), init, grads)
        for n in init:
            self.assertAllClose(vr_vars[n].numpy(), base_vars[n].numpy(), atol=1e-6, rtol=0)


if __name__ == "__main__":
    tf.test.main()
