"""Both VRGD families against the independent NumPy reference: family x optimizer x k.

Families: Keras 3 (``vrgd_tf.VRGD*`` on ``keras.Variable``) and tf_keras
(``vrgd_tf.tf_keras.VRGD*`` on ``tf.Variable``). Optimizers: SGD, Nesterov momentum, Adam,
LARS and LAMB. Replicas k = 1, 2, 4 (k = 1: no noise estimate, the base optimizer).

The data (``util.make_varying_problem``) has a GSNR that changes from step to step and from
element to element. With a per-element factor that is the same on every step, Adam and LAMB
cancel it in ``m / sqrt(v)`` and a run without any variance reduction would match too.
"""

import collections

import keras
import numpy as np
import tensorflow as tf
from absl.testing import parameterized

import vrgd_tf

import numpy_reference as ref
import util

if util.HAS_TF_KERAS:  # else (.ci/compat) the tf_keras cases skip
    import tf_keras
    from official.modeling.optimization import lamb as mg_lamb
    from official.modeling.optimization import lars as mg_lars

    from vrgd_tf import tf_keras as vtk

GAMMA = 0.1

Family = collections.namedtuple(
    "Family", ["classes", "bases", "make_variable", "optimizer_variables"]
)


def tf_variable(name, value):
    return tf.Variable(value, name=name)


FAMILIES = {
    "keras3": Family(
        classes={
            "sgd": vrgd_tf.VRGDSGD,
            "adam": vrgd_tf.VRGDAdam,
            "lars": vrgd_tf.VRGDLars,
            "lamb": vrgd_tf.VRGDLamb,
        },
        # gamma=1, beta_3=0 must equal these bitwise (up to float32 rounding order).
        bases={
            "sgd": keras.optimizers.SGD,
            "adam": keras.optimizers.Adam,
            "lars": vrgd_tf.Lars,
            "lamb": vrgd_tf.Lamb,
        },
        make_variable=None,  # keras.Variable
        optimizer_variables=lambda opt: list(opt.variables),
    ),
    "tf_keras": None
    if not util.HAS_TF_KERAS
    else Family(
        classes={
            "sgd": vtk.VRGDSGD,
            "adam": vtk.VRGDAdam,
            "lars": vtk.VRGDLars,
            "lamb": vtk.VRGDLamb,
        },
        bases={
            "sgd": tf_keras.optimizers.legacy.SGD,
            "adam": tf_keras.optimizers.legacy.Adam,
            "lars": mg_lars.LARS,
            "lamb": mg_lamb.LAMB,
        },
        make_variable=tf_variable,
        optimizer_variables=lambda opt: list(opt.weights),
    ),
}

# name -> (class key in Family.classes, kwargs, NumPy base factory, default beta_3).
# LARS: weight decay and layer adaptation exclude different variables, Nesterov on.
# LAMB: layer adaptation falls back to the weight-decay exclusions.
OPTIMIZERS = {
    "sgd": ("sgd", dict(learning_rate=0.1), lambda: ref.SGD(0.1), 0.0),
    "momentum": (
        "sgd",
        dict(learning_rate=0.1, momentum=0.9, nesterov=True),
        lambda: ref.SGD(0.1, 0.9, nesterov=True),
        0.0,
    ),
    "adam": ("adam", dict(learning_rate=0.01), lambda: ref.Adam(0.01), 0.9),
    "lars": (
        "lars",
        dict(
            learning_rate=0.5,
            momentum=0.9,
            weight_decay_rate=0.01,
            eeta=0.01,
            nesterov=True,
            exclude_from_weight_decay=["bias"],
            exclude_from_layer_adaptation=["kernel"],
        ),
        lambda: ref.Lars(
            0.5,
            0.9,
            0.01,
            0.01,
            nesterov=True,
            exclude_from_weight_decay=["bias"],
            exclude_from_layer_adaptation=["kernel"],
        ),
        0.0,
    ),
    "lamb": (
        "lamb",
        dict(learning_rate=0.01, weight_decay_rate=0.01, exclude_from_weight_decay=["bias"]),
        lambda: ref.Lamb(0.01, weight_decay_rate=0.01, exclude_from_weight_decay=["bias"]),
        0.9,
    ),
}


class ReferenceTest(tf.test.TestCase, parameterized.TestCase):
    def _family(self, name):
        if name == "tf_keras":
            util.skip_without_tf_keras(self)
        return FAMILIES[name]

    @parameterized.named_parameters(
        (f"_{family}_{name}_k{k}", family, name, k)
        for family in sorted(FAMILIES)
        for name in sorted(OPTIMIZERS)
        for k in (1, 2, 4)
    )
    def test_matches_numpy_reference(self, family, name, k):
        """Weights after 3 steps equal the float64 reference; every replica's copy of every
        model and optimizer variable is bitwise the same; the default beta_3 and the config
        are as documented."""
        fam = self._family(family)
        key, kwargs, base, beta_3 = OPTIMIZERS[name]
        cls = fam.classes[key]
        init, grads = util.make_varying_problem(k, seed=k + (10 if family == "tf_keras" else 0))
        variables, opt = util.run_custom_loop(
            util.strategy_for(k),
            lambda: cls(gamma=GAMMA, **kwargs),
            init,
            grads,
            make_variable=fam.make_variable,
        )
        self.assertEqual(opt.beta_3, beta_3)
        self.assertEqual(opt.gamma, GAMMA)
        util.assert_config_has(
            self,
            opt.get_config(),
            dict(gamma=GAMMA, beta_3=beta_3, statistics_interval=100, **kwargs),
        )

        vr = ref.VRGD(base(), GAMMA, beta_3)
        expected = util.numpy_run(vr, init, grads)
        for n in init:
            self.assertAllClose(variables[n].numpy(), expected[n], atol=1e-5, rtol=1e-5, msg=n)
        if k > 1:  # the factor must have bitten, or this test proves nothing
            self.assertLess(vr.factors["kernel"].min(), 0.5)
        for var in list(variables.values()) + fam.optimizer_variables(opt):
            copies = util.replica_values(var)
            self.assertLen(copies, k, msg=var.name)
            for c in copies[1:]:
                np.testing.assert_array_equal(c, copies[0], err_msg=var.name)

    @parameterized.named_parameters(
        (f"_{family}_{name}", family, name)
        for family in sorted(FAMILIES)
        for name in sorted(OPTIMIZERS)
        if name != "sgd"
    )
    def test_gamma_one_equals_base_optimizer(self, family, name):
        """gamma=1, beta_3=0 under 4 replicas: the base optimizer (Keras 3 SGD/Adam and this
        package's Lars/Lamb; tf_keras legacy SGD/Adam and Model Garden's LARS/LAMB).

        Every base class once: the SGD class through "momentum" (at gamma=1 the base gets
        the plain sum S1 whatever its own rule, so plain SGD adds only run time)."""
        fam = self._family(family)
        key, kwargs, _, _ = OPTIMIZERS[name]
        cls = fam.classes[key]
        base_cls = fam.bases[key]
        self.assertIs(cls._vrgd_base_class, base_cls)
        init, grads = util.make_varying_problem(4, seed=7)
        strategy = util.strategy_for(4)
        vr_vars, _ = util.run_custom_loop(
            strategy,
            lambda: cls(gamma=1.0, beta_3=0.0, **kwargs),
            init,
            grads,
            make_variable=fam.make_variable,
        )
        base_vars, _ = util.run_custom_loop(
            strategy, lambda: base_cls(**kwargs), init, grads, make_variable=fam.make_variable
        )
        for n in init:
            self.assertAllClose(vr_vars[n].numpy(), base_vars[n].numpy(), atol=1e-6, rtol=0, msg=n)

    @parameterized.named_parameters(("_k2", 2), ("_k4", 4))
    def test_reference_data_gsnr_varies_by_step_and_element(self, k):
        """The data's factor differs between steps for most elements, so no per-element
        constant cancels it out (see the module docstring)."""
        _, grads = util.make_varying_problem(k, seed=k)
        for n, g in grads.items():
            factors = np.stack([ref.gsnr_factor(g[t], GAMMA)[0] for t in range(g.shape[0])])
            changes = np.abs(np.diff(factors, axis=0)) > 0.05
            self.assertGreater(changes.mean(), 0.5, msg=n)
            self.assertGreater(factors.std(axis=tuple(range(1, factors.ndim))).min(), 0.1, msg=n)


if __name__ == "__main__":
    tf.test.main()
