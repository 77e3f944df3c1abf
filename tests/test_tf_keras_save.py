"""tf_keras family: SavedModel save/load and the shape and kind of the VRGD state.

The VRGD state of a trainable variable ``w`` is registered as optimizer slots
``vrgd_statistics`` (float32 ``[NUM_STATISTICS]``), and with ``beta_3 > 0``
``vrgd_deficit`` (float32, ``w.shape``) and ``vrgd_correction`` (float32 ``[]``), all
``ON_READ`` / ``ONLY_FIRST_REPLICA``. These tests check that every way ``OptimizerV2`` creates
or restores such a slot (SavedModel load, ``tf.train.Checkpoint`` restore before and after
the optimizer is built) keeps that shape and kind, and that training resumes exactly.

tf_keras's SavedModel keeps the optimizer state only in a stand-in (``load_model(...,
compile=False).optimizer``); ``load_model`` compiles a fresh optimizer, so resuming training
restores the state from the SavedModel's checkpoint with ``load_weights``, as for any
tf_keras optimizer.
"""

import os
import tempfile

import numpy as np
import tensorflow as tf
import tf_keras
from absl.testing import parameterized

from vrgd_tf import tf_keras as vtk
from vrgd_tf.gsnr.statistics import NUM_STATISTICS

import util

ON_READ = tf.VariableSynchronization.ON_READ
ONLY_FIRST_REPLICA = tf.VariableAggregation.ONLY_FIRST_REPLICA

# beta_3 = 0 (statistics only) for SGD; beta_3 > 0 (deficit and correction too) for the rest.
CASES = (
    ("sgd", vtk.VRGDSGD, dict(learning_rate=0.05, momentum=0.9, beta_3=0.0)),
    ("adam", vtk.VRGDAdam, dict(learning_rate=0.01, beta_3=0.9)),
    ("lars", vtk.VRGDLars, dict(learning_rate=0.5, momentum=0.9, beta_3=0.5)),
    ("lamb", vtk.VRGDLamb, dict(learning_rate=0.01, weight_decay_rate=0.01, beta_3=0.9)),
)
# k = 1 (no strategy) for one optimizer of each state kind, SGD and LAMB; k = 2 for all
# (each case is a SavedModel written and read twice: the suite's time). LAMB on 2 replicas
# also writes an h5 file and a tf.train.Checkpoint of the same trained model and resumes from
# each (one trained model for all three: the suite's time, issue 36).
PARAMS = [
    dict(
        testcase_name=f"{name}_k{k}",
        cls=cls,
        kwargs=kwargs,
        k=k,
        h5=(name, k) == ("lamb", 2),
        checkpoint=(name, k) == ("lamb", 2),
    )
    for name, cls, kwargs in CASES
    for k in ((1, 2) if name in ("sgd", "lamb") else (2,))
]
# LossScaleOptimizer exposes the inner optimizer's slots as its own. Regression (h5): tf_keras's
# LossScaleOptimizer writes its inner optimizer under the bare class name ("VRGDLamb"), so
# loading the h5 file failed with "Unknown optimizer".
PARAMS.append(
    dict(
        testcase_name="lamb_loss_scale_k2",
        cls=vtk.VRGDLamb,
        kwargs=dict(learning_rate=0.01, weight_decay_rate=0.01, beta_3=0.9),
        k=2,
        loss_scale=True,
        h5=True,
    )
)

_RNG = np.random.default_rng(3)
X = _RNG.normal(size=(32, 3)).astype(np.float32)
Y = _RNG.normal(size=(32, 2)).astype(np.float32)
BATCH = 16


def _strategy(k):
    """k == 1: no strategy (the default one); else MirroredStrategy over k logical CPUs."""
    return tf.distribute.get_strategy() if k == 1 else util.strategy_for(k)


def _model(cls, kwargs, loss_scale=False):
    """A compiled two-layer tf_keras model (call in the strategy scope)."""
    tf_keras.utils.set_random_seed(7)
    model = tf_keras.Sequential(
        [tf_keras.layers.Dense(4, activation="tanh", input_shape=(3,)), tf_keras.layers.Dense(2)]
    )
    optimizer = cls(**{"statistics_interval": 1, **kwargs})  # the tests read each step's
    if loss_scale:
        optimizer = tf_keras.mixed_precision.LossScaleOptimizer(optimizer)
    model.compile(optimizer=optimizer, loss="mse")
    return model


def _fit(model, steps):
    model.fit(
        X[: steps * BATCH], Y[: steps * BATCH], batch_size=BATCH, epochs=1, shuffle=False, verbose=0
    )


def _vrgd_slots(optimizer, model):
    """{(index in model.trainable_variables, slot name): slot variable}, ``vrgd_`` slots."""
    return {
        (i, s): optimizer.get_slot(v, s)
        for i, v in enumerate(model.trainable_variables)
        for s in optimizer.get_slot_names()
        if s.startswith("vrgd_")
    }


class _StateAssertions:
    """Assertions on the ``vrgd_`` slots of a tf_keras optimizer (mixed into TestCases)."""

    def assert_state_kind(self, optimizer, model, beta_3):
        """Every VRGD slot has its designed shape, dtype, synchronization and aggregation."""
        slots = _vrgd_slots(optimizer, model)
        expected = {"vrgd_statistics": lambda v: [NUM_STATISTICS]}
        if beta_3 > 0.0:
            expected.update(vrgd_deficit=lambda v: v.shape.as_list(), vrgd_correction=lambda v: [])
        self.assertEqual(sorted({s for _, s in slots}), sorted(expected))
        variables = model.trainable_variables
        self.assertLen(slots, len(variables) * len(expected))
        for (i, slot_name), slot in slots.items():
            msg = f"{variables[i].name} {slot_name}"
            self.assertEqual(slot.shape.as_list(), expected[slot_name](variables[i]), msg)
            self.assertEqual(slot.dtype, tf.float32, msg)
            self.assertEqual(slot.synchronization, ON_READ, msg)
            self.assertEqual(slot.aggregation, ONLY_FIRST_REPLICA, msg)
        return slots

    def assert_same_state(self, optimizer, model, ref_optimizer, ref_model):
        """The VRGD slots of both hold the same values, on every replica."""
        ref = _vrgd_slots(ref_optimizer, ref_model)
        got = _vrgd_slots(optimizer, model)
        self.assertEqual(sorted(got), sorted(ref))
        for key, slot in got.items():
            want = ref[key].numpy()
            for copy in util.replica_values(slot):
                self.assertAllEqual(copy, want, msg=str(key))


class SaveLoadTest(_StateAssertions, tf.test.TestCase, parameterized.TestCase):
    @parameterized.named_parameters(*PARAMS)
    def test_savedmodel_load_and_resume(
        self, cls, kwargs, k, loss_scale=False, h5=False, checkpoint=False
    ):
        """The SavedModel (and with ``h5``, the h5 file; with ``checkpoint``, a
        ``tf.train.Checkpoint`` restored into a fresh model before and after its optimizer is
        built) of a model trained 2 steps: the state's kind and values on load, then one more
        step on every copy, exactly."""
        strategy = _strategy(k)
        with strategy.scope():
            model = _model(cls, kwargs, loss_scale)
        _fit(model, steps=2)
        folder = tempfile.mkdtemp()
        path = os.path.join(folder, "saved_model")
        model.save(path, save_format="tf")
        if h5:  # the same trained model in both formats (the suite's time, issue 36)
            h5_path = os.path.join(folder, "model.h5")
            model.save(h5_path)
        fresh_models = ()
        if checkpoint:  # and in a checkpoint
            ckpt = tf.train.Checkpoint(model=model).save(os.path.join(folder, "ckpt"))
            with strategy.scope():
                before = _model(cls, kwargs, loss_scale)  # slots made by the restore
                after = _model(cls, kwargs, loss_scale)  # slots made by building, then restored
                after.optimizer._create_all_weights(after.trainable_variables)
            fresh_models = (before, after)
            for fresh in fresh_models:
                tf.train.Checkpoint(model=fresh).restore(ckpt).assert_existing_objects_matched()
                self.assert_state_kind(fresh.optimizer, fresh, kwargs["beta_3"])
                self.assert_same_state(fresh.optimizer, fresh, model.optimizer, model)

        # The SavedModel's own copy of the optimizer state (tf_keras's stand-in optimizer).
        with strategy.scope():
            raw = tf_keras.models.load_model(path, compile=False)
        self.assert_state_kind(raw.optimizer, raw, kwargs["beta_3"])
        self.assert_same_state(raw.optimizer, raw, model.optimizer, model)

        # Resume: load, restore the optimizer state, one more step on both runs.
        with strategy.scope():
            loaded = tf_keras.models.load_model(path)
        inner = getattr(loaded.optimizer, "inner_optimizer", loaded.optimizer)
        self.assertIsInstance(inner, cls)
        status = loaded.load_weights(os.path.join(path, "variables", "variables"))
        status.assert_existing_objects_matched()  # iterations is restored when built
        if h5:
            with strategy.scope():
                from_h5 = tf_keras.models.load_model(h5_path)
            h5_inner = getattr(from_h5.optimizer, "inner_optimizer", from_h5.optimizer)
            self.assertIsInstance(h5_inner, cls)
            self.assertEqual(
                h5_inner.get_config(),
                model.optimizer.get_config()
                .get("inner_optimizer", {})
                .get("config", model.optimizer.get_config()),
            )
        _fit(model, steps=1)
        _fit(loaded, steps=1)
        self.assertEqual(int(loaded.optimizer.iterations.numpy()), 3)
        for want, got in zip(model.get_weights(), loaded.get_weights()):
            self.assertAllClose(got, want, rtol=1e-6, atol=1e-7)
        self.assert_state_kind(loaded.optimizer, loaded, kwargs["beta_3"])
        self.assert_same_state(loaded.optimizer, loaded, model.optimizer, model)
        stats = inner.vrgd_statistics()
        want = getattr(model.optimizer, "inner_optimizer", model.optimizer).vrgd_statistics()
        if k == 1:
            self.assertEqual(stats, want)
        else:
            # tf_keras names the variables of a model loaded under a strategy without their
            # layer scope ("kernel:0"): the diagnostics keep one distinct entry per variable
            # ("kernel", "kernel_1"), in the same order, with the same values.
            self.assertLen(stats, len(want))
            self.assertEqual(list(stats.values()), list(want.values()))
            # a noise estimate exists: the diagnostics were recorded
            self.assertTrue(any(s["mean_gsnr"] > 0.0 for s in stats.values()), stats)
        if h5:  # the h5 file resumes exactly too
            _fit(from_h5, steps=1)
            self.assertEqual(int(from_h5.optimizer.iterations.numpy()), 3)
            for want, got in zip(model.get_weights(), from_h5.get_weights()):
                self.assertAllClose(got, want, rtol=1e-6, atol=1e-7)
            self.assert_same_state(from_h5.optimizer, from_h5, model.optimizer, model)
        for fresh in fresh_models:  # and the checkpoint, into either fresh model
            _fit(fresh, steps=1)
            for want, got in zip(model.get_weights(), fresh.get_weights()):
                self.assertAllClose(got, want, rtol=1e-6, atol=1e-7)
            self.assert_same_state(fresh.optimizer, fresh, model.optimizer, model)


if __name__ == "__main__":
    tf.test.main()
