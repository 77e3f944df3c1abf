"""Sparse (``tf.IndexedSlices``) gradients: one rule on every replica count.

The variance-reduced gradient of a sparse gradient is what the strategy's own SUM gives for it
(every replica's rows, duplicates kept) with each row scaled by its factor, so the base
optimizer applies its own sparse rule whatever the replica count, and ``gamma=1, beta_3=0`` is
the base optimizer exactly. Bases without a sparse rule get the gradient dense, on every
replica count.
"""

import logging

import keras
import numpy as np
import tensorflow as tf
import tf_keras
from absl.testing import parameterized

import vrgd_tf
from vrgd_tf import tf_keras as vtk

import numpy_reference as ref
import util

SHAPE = (10, 2)
# Four shards of three rows each: duplicates within a shard (3, 3 and 9, 9), rows touched by
# one shard only (1, 4, 8), rows touched by several (3, 7, 9), rows touched by none (2, 5, 6).
ROWS = np.array([[3, 3, 7], [7, 9, 9], [1, 3, 3], [9, 4, 8]], np.int32)
STEPS = 2
VALUES = np.random.RandomState(0).randn(STEPS, 4, 3, 2).astype(np.float32)

KERAS3 = "keras3"
TF_KERAS = "tf_keras"


def run_sparse(family, k, make_optimizer, scale=None, with_optimizer=False):
    """Trains one (10, 2) variable from ones with the four shards spread over k replicas.

    Args:
      family: KERAS3 or TF_KERAS (variable type).
      k: replicas (1, 2 or 4); replica d sends shards d*4/k .. (d+1)*4/k - 1 as one
        ``tf.IndexedSlices``.
      make_optimizer: () -> optimizer.
      scale: None, or float32 [STEPS, 10, 2]: multiply each row's values by
        ``scale[step, row]`` before handing them over (the VRGD factor, for the base).
      with_optimizer: also return the optimizer (its state and diagnostics).

    Returns:
      The variable's value, numpy (10, 2); with ``with_optimizer``, ``(value, optimizer)``.
    """
    strategy = util.strategy_for(k)
    with strategy.scope():
        init = np.ones(SHAPE, np.float32)
        var = keras.Variable(init, name="emb") if family == KERAS3 else tf.Variable(init)
        opt = make_optimizer()
        if family == KERAS3:
            opt.build([var])
    per = 4 // k
    rows = tf.constant(ROWS)
    values = tf.constant(VALUES)
    factors = tf.constant(np.ones((STEPS,) + SHAPE, np.float32) if scale is None else scale)

    @tf.function
    def step(i):
        def fn():
            rid = tf.distribute.get_replica_context().replica_id_in_sync_group
            shards = tf.range(rid * per, (rid + 1) * per)
            idx = tf.reshape(tf.gather(rows, shards), [-1])
            val = tf.reshape(tf.gather(values[i], shards), [-1, SHAPE[1]])
            val = val * tf.gather(factors[i], idx)
            opt.apply_gradients([(tf.IndexedSlices(val, idx, tf.constant(SHAPE)), var)])

        strategy.run(fn)

    for i in range(STEPS):
        step(tf.constant(i))
    return (np.array(var.numpy()), opt) if with_optimizer else np.array(var.numpy())


def dense_replica_gradients(k):
    """float64 [STEPS, k, 10, 2]: each replica's sparse gradient made dense."""
    per = 4 // k
    out = np.zeros((STEPS, k) + SHAPE)
    for t in range(STEPS):
        for d in range(k):
            for shard in range(d * per, (d + 1) * per):
                np.add.at(out[t, d], ROWS[shard], VALUES[t, shard])
    return out


BASES = {
    (KERAS3, "momentum"): (
        lambda **kw: vrgd_tf.VRGDSGD(0.1, momentum=0.9, **kw),
        lambda: keras.optimizers.SGD(0.1, momentum=0.9),
    ),
    (KERAS3, "adam"): (
        lambda **kw: vrgd_tf.VRGDAdam(0.01, **kw),
        lambda: keras.optimizers.Adam(0.01),
    ),
    (KERAS3, "lamb"): (lambda **kw: vrgd_tf.VRGDLamb(0.01, **kw), lambda: vrgd_tf.Lamb(0.01)),
    (KERAS3, "lars"): (lambda **kw: vrgd_tf.VRGDLars(0.1, **kw), lambda: vrgd_tf.Lars(0.1)),
    (TF_KERAS, "momentum"): (
        lambda **kw: vtk.VRGDSGD(0.1, momentum=0.9, **kw),
        lambda: tf_keras.optimizers.legacy.SGD(0.1, momentum=0.9),
    ),
    (TF_KERAS, "adam"): (
        lambda **kw: vtk.VRGDAdam(0.01, **kw),
        lambda: tf_keras.optimizers.legacy.Adam(0.01),
    ),
    (TF_KERAS, "lamb"): (
        lambda **kw: vtk.VRGDLamb(0.01, **kw),
        lambda: vtk.VRGDLamb._vrgd_base_class(0.01),
    ),
}


class SparseRuleTest(tf.test.TestCase, parameterized.TestCase):
    @parameterized.parameters(*sorted(BASES))
    def test_vr_off_is_the_base_on_every_replica_count(self, family, name):
        make_vr, make_base = BASES[(family, name)]
        results = {}
        # 1 replica and the count that the scaled-rows test does not run for this optimizer,
        # so that each optimizer sees 1, 2 and 4 replicas across the two tests (4 for SGD and
        # Adam, 2 for LAMB and LARS: the suite's time, issue 36).
        many = 4 if name in ("momentum", "adam") else 2
        for k in (1, many):
            results[k] = run_sparse(family, k, lambda: make_vr(gamma=1.0, beta_3=0.0))  # noqa
            base = run_sparse(family, k, make_base)
            self.assertAllEqual(results[k], base, msg=f"k={k}")
        self.assertAllClose(results[many], results[1], rtol=0, atol=1e-6, msg=f"k={many}")
        self.assertGreater(np.abs(results[1] - 1.0).max(), 1e-4)  # it trained

    @parameterized.parameters(*sorted(BASES))
    def test_vr_is_the_base_fed_rows_scaled_by_the_reference_factor(self, family, name):
        """The factor of the dense statistics (NumPy reference) scales each sparse row."""
        make_vr, make_base = BASES[(family, name)]
        # 2 replicas for SGD and Adam, 4 for LAMB and LARS (the vr-off test runs the other).
        for k in (2,) if name in ("momentum", "adam") else (4,):
            grads = dense_replica_gradients(k)
            factors = np.stack([ref.gsnr_factor(grads[t], 0.1)[0] for t in range(STEPS)])
            self.assertLess(factors[:, [3, 7, 9]].min(), 0.99)  # VRGD did scale rows
            vr = run_sparse(family, k, lambda: make_vr(gamma=0.1, beta_3=0.0))  # noqa
            expected = run_sparse(family, k, make_base, scale=factors.astype(np.float32))
            # float32 statistics vs the float64 reference factor (see gsnr.py: precision)
            self.assertAllClose(vr, expected, rtol=1e-4, atol=1e-5, msg=f"k={k}")
            for row in (2, 5, 6):  # touched by no replica: untouched by any rule here
                self.assertAllEqual(vr[row], np.ones(2))

    def test_lars_without_sparse_rule_gets_dense_gradients_on_every_replica_count(self):
        """Model Garden's LARS raises NotImplementedError for sparse gradients; VRGD hands it
        the dense sum instead, the same on 1, 2 and 4 replicas."""
        results = {
            k: run_sparse(TF_KERAS, k, lambda: vtk.VRGDLars(0.1, gamma=1.0, statistics_interval=1))
            for k in (1, 2, 4)
        }
        dense = dense_replica_gradients(1)[:, 0]
        w = {"emb": np.ones(SHAPE)}
        base = ref.Lars(0.1, 0.9, 0.0, 0.001)
        for t in range(STEPS):
            w["emb"] = base.step("emb", w["emb"], dense[t])
        for k in (1, 2, 4):
            self.assertAllClose(results[k], w["emb"], rtol=1e-5, atol=1e-6, msg=f"k={k}")

    @parameterized.parameters(vrgd_tf.Lamb, vrgd_tf.VRGDLamb, vrgd_tf.Lars, vrgd_tf.VRGDLars)
    def test_keras3_lamb_and_lars_accept_sparse_gradients_on_one_device(self, cls):
        """Rows [1, 2] and [3, 4] both at index 3: LAMB moves row 3 to 0.96838 (as the
        dense gradient and Model Garden's LAMB do); LARS as its dense gradient."""
        sparse = tf.IndexedSlices(
            tf.constant([[1.0, 2.0], [3.0, 4.0]]), tf.constant([3, 3]), tf.constant([10, 2])
        )
        out = []
        for grad in (sparse, tf.convert_to_tensor(sparse)):
            v = keras.Variable(np.ones((10, 2), np.float32))
            opt = cls(0.01)
            opt.build([v])
            opt.apply_gradients([(grad, v)])
            out.append(v.numpy())
        self.assertAllEqual(out[0], out[1])
        if issubclass(cls, vrgd_tf.Lamb):
            self.assertAllClose(out[0][3], [0.96838, 0.96838], atol=1e-5)
        else:
            self.assertLess(out[0][3].max(), 1.0)
        self.assertAllEqual(np.delete(out[0], 3, axis=0), np.ones((9, 2)))

    def test_embedding_model_fit_vr_off_same_on_one_and_two_replicas(self):
        rng = np.random.RandomState(1)
        x = rng.randint(0, 50, size=(32, 6)).astype(np.int32)
        y = rng.randn(32, 1).astype(np.float32)
        out = {}
        for k in (1, 2):
            with util.strategy_for(k).scope():
                keras.utils.set_random_seed(3)
                model = keras.Sequential(
                    [
                        keras.Input((6,), dtype="int32"),
                        keras.layers.Embedding(50, 4),
                        keras.layers.GlobalAveragePooling1D(),
                        keras.layers.Dense(1),
                    ]
                )
                model.compile(
                    optimizer=vrgd_tf.VRGDAdam(0.05, gamma=1.0, beta_3=0.0, statistics_interval=1),
                    loss="mse",
                )
            model.fit(x, y, batch_size=32, epochs=3, verbose=0, shuffle=False)
            out[k] = [w.numpy() for w in model.trainable_variables]
        for a, b in zip(out[1], out[2]):
            self.assertAllClose(a, b, rtol=1e-5, atol=1e-6)


class UnmatchedExclusionTest(tf.test.TestCase, parameterized.TestCase):
    """A pattern that matches no trainable variable gets one log line naming it."""

    def _variables(self, family):
        def make(path):
            scope, name = path.split("/")
            if family == TF_KERAS:
                return tf.Variable(np.ones(2, np.float32), name=path)
            with keras.name_scope(scope):
                return keras.Variable(np.ones(2, np.float32), name=name)

        return [make("dense/kernel"), make("dense/bias"), make("layer_norm/gamma")]

    def _build(self, family, opt, variables):
        if family == KERAS3:
            opt.build(variables)
        else:
            opt._create_all_weights(variables)

    @parameterized.parameters(
        (KERAS3, vrgd_tf.VRGDLamb),
        (KERAS3, vrgd_tf.VRGDLars),
        (TF_KERAS, vtk.VRGDLamb),
        (TF_KERAS, vtk.VRGDLars),
    )
    def test_unmatched_patterns_are_named_once(self, family, cls):
        opt = cls(
            0.01,
            weight_decay_rate=0.01,
            exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"],
            exclude_from_layer_adaptation=["bn/", "layer_norm"],
        )
        with self.assertLogs("vrgd_tf", level="WARNING") as logs:
            self._build(family, opt, self._variables(family))
        lines = [r.getMessage() for r in logs.records if "matches none" in r.getMessage()]
        self.assertLen(lines, 2, lines)
        self.assertIn("`exclude_from_weight_decay` pattern 'LayerNorm'", lines[0])
        self.assertIn("`exclude_from_layer_adaptation` pattern 'bn/'", lines[1])

    def test_fit_without_a_strategy_builds_inside_the_step_and_names_the_pattern(self):
        """Keras 3 without a strategy builds the optimizer inside the traced step: the
        pattern check reads the config eagerly there (it used to fail with "numpy() is
        only available when eager execution is enabled")."""
        rng = np.random.RandomState(0)
        x, y = rng.randn(16, 3).astype(np.float32), rng.randn(16, 1).astype(np.float32)
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, name="d")])
        model.compile(
            optimizer=vrgd_tf.VRGDLamb(
                0.01,
                weight_decay_rate=0.01,
                exclude_from_weight_decay=["LayerNorm"],
                statistics_interval=1,
            ),
            loss="mse",
        )
        with self.assertLogs("vrgd_tf", level="WARNING") as logs:
            model.fit(x, y, batch_size=16, epochs=1, verbose=0)
        self.assertTrue(any("'LayerNorm' matches none" in r.getMessage() for r in logs.records))
        self.assertTrue(np.isfinite(model.layers[0].kernel.numpy()).all())

    @parameterized.parameters(KERAS3, TF_KERAS)
    def test_matching_patterns_and_the_fallback_list_say_nothing(self, family):
        cls = vrgd_tf.VRGDLamb if family == KERAS3 else vtk.VRGDLamb
        opt = cls(0.01, exclude_from_weight_decay=["bias", "layer_norm"])
        with self.assertLogs("vrgd_tf", level="WARNING") as logs:
            self._build(family, opt, self._variables(family))
            logging.getLogger("vrgd_tf").warning("sentinel")
        self.assertEqual([r.getMessage() for r in logs.records], ["sentinel"])


if __name__ == "__main__":
    tf.test.main()
