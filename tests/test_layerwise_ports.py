"""The Keras 3 ports ``vrgd_tf.Lamb`` and ``vrgd_tf.Lars`` against Model Garden's own
``official.modeling.optimization.lamb.LAMB`` and ``lars.LARS`` (tf_keras legacy optimizers on
``tf.Variable``), option by option, on one device.

Both ports claim to step exactly as Model Garden for float32 variables, so every constructor
option is compared numerically over several steps whose gradients change in direction and
scale: ``nesterov``, ``classic_momentum``, ``momentum``, ``eeta``, ``weight_decay_rate``,
``beta_1``/``beta_2``/``epsilon``, and exclusion lists where ``exclude_from_weight_decay`` and
``exclude_from_layer_adaptation`` name different variables (so that testing one list in place
of the other, or ignoring an option, changes the weights).

Variables: ``kernel`` [4, 3], ``bias`` [3] and ``scale`` [2] (matched by no list below, so
it always gets weight decay and the trust ratio). Model Garden matches patterns against
``tf.Variable.name`` without ``:0``, the ports against ``keras.Variable.path``: both are the
bare name here.
"""

import keras
import numpy as np
import tensorflow as tf
from absl.testing import parameterized
from official.modeling.optimization import lamb as mg_lamb
from official.modeling.optimization import lars as mg_lars

import vrgd_tf
from vrgd_tf import tf_keras as vtk

SHAPES = {"kernel": (4, 3), "bias": (3,), "scale": (2,)}
STEPS = 4
# float32 on both sides, same formulas: only the rounding of the norms may differ.
TOL = dict(rtol=2e-6, atol=1e-6)

LARS_CASES = [
    ("defaults", dict()),
    ("nesterov", dict(nesterov=True)),
    ("popular_momentum", dict(classic_momentum=False)),
    ("popular_momentum_nesterov", dict(classic_momentum=False, nesterov=True)),
    ("momentum_eeta", dict(momentum=0.5, eeta=0.05)),
    ("no_momentum", dict(momentum=0.0, eeta=0.02)),
    ("weight_decay_all", dict(weight_decay_rate=0.1, eeta=0.01)),
    (
        "wd_excludes_bias_la_excludes_kernel",
        dict(
            weight_decay_rate=0.1,
            eeta=0.01,
            exclude_from_weight_decay=["bias"],
            exclude_from_layer_adaptation=["kernel"],
        ),
    ),
    (
        "wd_excludes_bias_la_falls_back",
        dict(weight_decay_rate=0.1, eeta=0.01, exclude_from_weight_decay=["bias"]),
    ),
    (
        "la_excludes_bias_only",
        dict(weight_decay_rate=0.1, eeta=0.01, exclude_from_layer_adaptation=["bias"]),
    ),
    (
        "all_options_classic",
        dict(
            momentum=0.8,
            weight_decay_rate=0.05,
            eeta=0.02,
            nesterov=True,
            exclude_from_weight_decay=["kernel"],
            exclude_from_layer_adaptation=["bias"],
        ),
    ),
    (
        "all_options_popular",
        dict(
            momentum=0.8,
            weight_decay_rate=0.05,
            eeta=0.02,
            nesterov=True,
            classic_momentum=False,
            exclude_from_weight_decay=["bias"],
            exclude_from_layer_adaptation=["kernel"],
        ),
    ),
]

LAMB_CASES = [
    ("defaults", dict()),
    ("betas_epsilon", dict(beta_1=0.5, beta_2=0.9, epsilon=1e-2)),
    ("weight_decay_all", dict(weight_decay_rate=0.1)),
    (
        "wd_excludes_bias_la_excludes_kernel",
        dict(
            weight_decay_rate=0.1,
            exclude_from_weight_decay=["bias"],
            exclude_from_layer_adaptation=["kernel"],
        ),
    ),
    (
        "wd_excludes_bias_la_falls_back",
        dict(weight_decay_rate=0.1, exclude_from_weight_decay=["bias"]),
    ),
    ("la_excludes_bias_only", dict(weight_decay_rate=0.1, exclude_from_layer_adaptation=["bias"])),
    (
        "all_options",
        dict(
            beta_1=0.7,
            beta_2=0.95,
            epsilon=1e-3,
            weight_decay_rate=0.05,
            exclude_from_weight_decay=["kernel"],
            exclude_from_layer_adaptation=["bias"],
        ),
    ),
]


def make_data(seed):
    """Initial weights and STEPS gradients per variable; each step's gradient has its own
    direction and a scale between e**-2 and e**2, per element."""
    rng = np.random.RandomState(seed)
    init = {n: rng.randn(*s).astype(np.float32) for n, s in SHAPES.items()}
    grads = {
        n: (rng.randn(STEPS, *s) * np.exp(rng.uniform(-2.0, 2.0, (STEPS,) + s))).astype(np.float32)
        for n, s in SHAPES.items()
    }
    return init, grads


def run_model_garden(cls, kwargs, init, grads):
    """Weights after each step under Model Garden's optimizer on tf.Variable."""
    variables = {n: tf.Variable(v, name=n) for n, v in init.items()}
    opt = cls(**kwargs)
    out = []
    for t in range(STEPS):
        opt.apply_gradients([(tf.constant(grads[n][t]), variables[n]) for n in init])
        out.append({n: v.numpy() for n, v in variables.items()})
    return out


def run_port(cls, kwargs, init, grads):
    """Weights after each step under the Keras 3 port on keras.Variable."""
    variables = {n: keras.Variable(v, name=n) for n, v in init.items()}
    opt = cls(**kwargs)
    out = []
    for t in range(STEPS):
        opt.apply_gradients([(tf.constant(grads[n][t]), variables[n]) for n in init])
        out.append({n: np.asarray(v.numpy()) for n, v in variables.items()})
    return out


class LayerwisePortsTest(tf.test.TestCase, parameterized.TestCase):
    def assert_same_trajectory(self, got, expected, init):
        for t, (g, e) in enumerate(zip(got, expected)):
            for n in init:
                self.assertAllClose(g[n], e[n], **TOL, msg=f"step {t} {n}")
        for n in init:  # the case is not vacuous: every variable moved
            changed = np.abs(expected[-1][n] - init[n]).max()
            self.assertGreater(changed, 100 * TOL["atol"], msg=n)

    @parameterized.named_parameters(LARS_CASES)
    def test_lars_port_steps_as_model_garden_lars(self, kwargs):
        init, grads = make_data(1)
        kwargs = dict(learning_rate=0.5, **kwargs)
        self.assert_same_trajectory(
            run_port(vrgd_tf.Lars, kwargs, init, grads),
            run_model_garden(mg_lars.LARS, kwargs, init, grads),
            init,
        )

    @parameterized.named_parameters(LAMB_CASES)
    def test_lamb_port_steps_as_model_garden_lamb(self, kwargs):
        init, grads = make_data(2)
        kwargs = dict(learning_rate=0.05, **kwargs)
        self.assert_same_trajectory(
            run_port(vrgd_tf.Lamb, kwargs, init, grads),
            run_model_garden(mg_lamb.LAMB, kwargs, init, grads),
            init,
        )

    @parameterized.named_parameters(
        (
            "lars",
            mg_lars.LARS,
            dict(learning_rate=0.5, weight_decay_rate=0.1),
            [
                dict(nesterov=True),
                dict(classic_momentum=False),
                dict(momentum=0.5),
                dict(eeta=0.01),
                dict(weight_decay_rate=0.0),
                dict(exclude_from_weight_decay=["bias"]),
                dict(exclude_from_layer_adaptation=["bias"]),
            ],
        ),
        (
            "lamb",
            mg_lamb.LAMB,
            dict(learning_rate=0.05, weight_decay_rate=0.1),
            [
                dict(beta_1=0.5),
                dict(beta_2=0.9),
                dict(epsilon=1e-2),
                dict(weight_decay_rate=0.0),
                dict(exclude_from_weight_decay=["bias"]),
                dict(exclude_from_layer_adaptation=["bias"]),
            ],
        ),
    )
    def test_each_option_changes_the_model_garden_trajectory(self, base, kwargs, flips):
        """Sanity of the cases above: each option flipped alone moves Model Garden's
        weights by at least 100 times the tolerance, so a port that ignored it would fail."""
        init, grads = make_data(3)
        reference = run_model_garden(base, kwargs, init, grads)[-1]
        for flip in flips:
            other = run_model_garden(base, dict(kwargs, **flip), init, grads)[-1]
            diff = max(np.abs(other[n] - reference[n]).max() for n in init)
            self.assertGreater(diff, 100 * TOL["atol"], msg=str(flip))

    # Regression: the ports accepted `epsilon=0` (documented ">= 0") and then divided 0 by 0
    # for an element whose gradient had been 0 so far: vrgd_tf.Lamb(0.1, epsilon=0.0) on
    # w = (1, 2) with gradient (0.5, 0) gave w = (0.9, nan). Now refused by name.
    def test_lamb_port_epsilon_zero_is_refused_by_name(self):
        for cls in (vrgd_tf.Lamb, vrgd_tf.VRGDLamb):
            with self.assertRaisesRegex(ValueError, "`epsilon` must be > 0"):
                cls(0.1, epsilon=0.0)
        w = keras.Variable(np.array([1.0, 2.0], np.float32), name="w")
        opt = vrgd_tf.Lamb(0.1, epsilon=1e-6)
        opt.apply_gradients([(tf.constant([0.5, 0.0]), w)])
        self.assertAllEqual(np.isfinite(w.numpy()), [True, True])
        self.assertEqual(float(w.numpy()[1]), 2.0)

    # Regression: vrgd_tf.tf_keras.VRGDLamb(epsilon=0.0) passed the argument check, then
    # Model Garden's LAMB ran `epsilon or tf.backend_config.epsilon()`, an AttributeError on
    # TensorFlow 2.20. Now a ValueError naming `epsilon` at construction.
    def test_tf_keras_vrgd_lamb_epsilon_zero_is_refused_by_name(self):
        with self.assertRaisesRegex(ValueError, "`epsilon` must be > 0"):
            vtk.VRGDLamb(0.1, epsilon=0.0, statistics_interval=1)


if __name__ == "__main__":
    tf.test.main()
