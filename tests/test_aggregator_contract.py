"""The output contract of ``vrgd_tf.GSNRAggregator`` (issue 35, item 3): each of the ``R``
replicas gets its share, ``(variance-reduced sum) / R``, so that whatever a custom loop does
next and whichever optimizer all-reduces it, the step is the variance-reduced sum applied
once, never ``R`` times too far.

Every path on 4 logical CPU replicas (``MirroredStrategy`` with ``ReductionToOneDevice``):
the output untouched, after ``tf.identity``, ``* 1.0``, a cast to float16 and back,
``tf.clip_by_global_norm``, ``tf.clip_by_norm``, ``tf.clip_by_value``, loss-scale unscaling,
then Keras 3 ``apply`` / ``apply_gradients``, tf_keras ``apply_gradients`` with its default
aggregation, with and without ``vrgd_tf.tf_keras`` imported. The reference is the NumPy
reference's variance-reduced sum (``numpy_reference.gsnr_factor``) applied once by SGD.
Paths that differ only in what is done to a share (the transforms, the clips) run in one
step, each on its own variable (the factor is each variable's own: the suite's time, issue
36).
"""

import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import tensorflow as tf
from absl.testing import parameterized

import vrgd_tf

import numpy_reference
import util

R = 4
LR = 0.1
GAMMA = 0.1
#: Replica i's gradient of ``w`` (the GSNR differs by element, so the factor does too).
GRADS = np.array(
    [[1.0, -2.0, 0.5], [0.5, -1.0, 3.0], [2.0, 0.0, -1.0], [0.0, 1.0, 1.0]], np.float32
)
INIT = np.ones(3, np.float32)
FACTOR, S1 = numpy_reference.gsnr_factor(GRADS, GAMMA)
#: The variance-reduced sum of the replicas' gradients.
WEIGHTED_SUM = FACTOR * S1
#: A clip threshold above the norms of the sum and of every element: clipping is inactive.
LOOSE = 100.0


def clip_np(x, c):
    """``tf.clip_by_global_norm`` of one array, in NumPy."""
    norm = np.linalg.norm(x)
    return x * min(1.0, c / norm)


def one_step(make_optimizer, replica_step, *, legacy=False, replicas=R, also_build=(), count=None):
    """One training step on ``replicas`` replicas: replica i's loss is ``sum(w * GRADS[i])``;
    ``replica_step(aggregator, optimizer, w, x)`` runs in the replica context (inside
    ``strategy.run`` in a ``tf.function``). ``also_build``: more aggregators to build on
    ``w`` in the strategy scope. ``count``: that many variables ``w`` (each ``INIT``, the
    loss their sum), handed to ``replica_step`` as a list. Returns ``(w after the step,
    aggregator)``, ``w`` a list with ``count``."""
    strategy = util.strategy_for(replicas)
    names = ["w"] if count is None else [f"w{i}" for i in range(count)]
    with strategy.scope():
        ws = [(tf.Variable if legacy else keras.Variable)(INIT, name=n) for n in names]
        aggregator = vrgd_tf.GSNRAggregator(gamma=GAMMA, statistics_interval=1)
        aggregator.build(ws)
        for other in also_build:
            other.build(ws)
        optimizer = make_optimizer()
        if not legacy:
            optimizer.build(ws)
    grads = tf.constant(GRADS[:replicas])

    @tf.function
    def step():
        def fn():
            x = tf.gather(grads, tf.distribute.get_replica_context().replica_id_in_sync_group)
            replica_step(aggregator, optimizer, ws[0] if count is None else ws, x)

        strategy.run(fn)

    step()
    values = [np.array(w.numpy()) for w in ws]
    return (values[0] if count is None else values), aggregator


def local_gradient(w, x, scale=None):
    """This replica's gradient of ``sum(w * x)`` (times ``scale(loss)``'s factor), by tape;
    ``w`` a variable or a list (the loss summed over them: each one's gradient is ``x``)."""
    ws = w if isinstance(w, list) else [w]
    with tf.GradientTape() as tape:
        loss = tf.add_n([tf.reduce_sum(v * x) for v in ws])
        if scale is not None:
            loss = scale(loss)
    return tape.gradient(loss, ws)


#: Steps a custom loop takes between the aggregator and the optimizer (inactive clipping).
TRANSFORMS = {
    "untouched": lambda g: g,
    "identity": tf.identity,
    "times_one": lambda g: g * 1.0,
    "cast_float16": lambda g: tf.cast(tf.cast(g, tf.float16), tf.float32),
    "clip_by_global_norm": lambda g: tf.clip_by_global_norm([g], LOOSE)[0][0],
    "clip_by_norm": lambda g: tf.clip_by_norm(g, LOOSE),
    "clip_by_value": lambda g: tf.clip_by_value(g, -LOOSE, LOOSE),
}
#: The float16 round trip's relative error, which the cast path allows.
RTOL = {"cast_float16": 1e-3}


#: Clips of a share at a threshold: ``(clip in TensorFlow, the same in NumPy)``.
CLIPS = {
    "clip_by_global_norm": (lambda g, c: tf.clip_by_global_norm([g], c)[0][0], clip_np),
    "clip_by_norm": (tf.clip_by_norm, clip_np),
    "clip_by_value": (lambda g, c: tf.clip_by_value(g, -c, c), lambda x, c: x.clip(-c, c)),
}


def keras3_apply(optimizer, grads, ws):
    optimizer.apply(grads, ws)


def keras3_apply_gradients(optimizer, grads, ws):
    optimizer.apply_gradients(zip(grads, ws))


class ContractTest(tf.test.TestCase, parameterized.TestCase):
    def assert_step(self, w, update, rtol=1e-5):
        """``w`` moved by one SGD step on ``update`` (and not ``R`` times as far)."""
        moved = INIT - w
        ratio = np.linalg.norm(moved) / np.linalg.norm(LR * update)
        self.assertAllClose(
            moved, LR * update, rtol=rtol, atol=1e-6, msg=f"{ratio:.4f} times the reference"
        )

    @parameterized.named_parameters(
        ("apply", keras3_apply), ("apply_gradients", keras3_apply_gradients)
    )
    def test_keras3_optimizer(self, apply):
        """Keras 3 SGD ``apply`` / ``apply_gradients`` of the output, after each transform
        (one variable each, one step): the variance-reduced sum applied once (main: refused
        untouched, 4x otherwise)."""
        transforms = sorted(TRANSFORMS)

        def replica_step(aggregator, optimizer, ws, x):
            shares = aggregator(local_gradient(ws, x), ws)
            apply(optimizer, [TRANSFORMS[t](g) for t, g in zip(transforms, shares)], ws)

        ws, _ = one_step(lambda: keras.optimizers.SGD(LR), replica_step, count=len(transforms))
        for transform, w in zip(transforms, ws):
            with self.subTest(transform=transform):
                self.assert_step(w, WEIGHTED_SUM, rtol=RTOL.get(transform, 1e-5))

    def test_keras3_loss_scale_optimizer(self):
        """Keras 3 mixed-precision custom loop: ``scale_loss``, the aggregator on the scaled
        gradients, ``LossScaleOptimizer.apply_gradients`` (which unscales, then the inner
        optimizer all-reduces)."""

        def replica_step(aggregator, optimizer, w, x):
            shares = aggregator(local_gradient(w, x, optimizer.scale_loss), [w])
            optimizer.apply_gradients(zip(shares, [w]))

        w, _ = one_step(
            lambda: keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(LR)), replica_step
        )
        self.assert_step(w, WEIGHTED_SUM)

    def test_clipping_a_share_clips_the_sum_at_r_times_c(self):
        """Clipping a share at ``c`` is clipping the sum at ``R * c`` (never further than the
        unclipped step); clipping the shares at ``c / R`` clips the sum at ``c``. Each clip
        at each threshold on its own variable, in one step."""
        c = 0.3
        cases = [(name, threshold) for name in sorted(CLIPS) for threshold in (c, c / R)]

        def replica_step(aggregator, optimizer, ws, x):
            shares = aggregator(local_gradient(ws, x), ws)
            clipped = [CLIPS[name][0](g, t) for (name, t), g in zip(cases, shares)]
            optimizer.apply_gradients(zip(clipped, ws))

        ws, _ = one_step(lambda: keras.optimizers.SGD(LR), replica_step, count=len(cases))
        for (name, threshold), w in zip(cases, ws):
            with self.subTest(clip=name, threshold=threshold):
                self.assert_step(w, CLIPS[name][1](WEIGHTED_SUM, R * threshold))
                self.assertLessEqual(
                    np.linalg.norm(INIT - w), np.linalg.norm(LR * WEIGHTED_SUM) * (1 + 1e-6)
                )

    def test_keras3_global_clipnorm_clips_the_sum_at_r_times_c(self):
        """A Keras 3 optimizer clips before its all-reduce, so its ``global_clipnorm`` acts
        on the share: the sum is clipped at ``R * c`` (the aggregator's docstring)."""

        def replica_step(aggregator, optimizer, w, x):
            optimizer.apply_gradients(zip(aggregator(local_gradient(w, x), [w]), [w]))

        w, _ = one_step(lambda: keras.optimizers.SGD(LR, global_clipnorm=0.3), replica_step)
        self.assert_step(w, clip_np(WEIGHTED_SUM, R * 0.3))

    def test_vrgd_optimizer_or_second_aggregator_given_shares_steps_the_sum_once(self):
        """Shares are the same on every replica: a VRGD optimizer (or a second aggregator
        call) finds no noise, warns that it is inert and steps their sum, once."""

        def replica_step(aggregator, optimizer, w, x):
            shares = aggregator(local_gradient(w, x), [w])
            optimizer.apply_gradients(zip(shares, [w]))

        with self.assertLogs("vrgd_tf", "WARNING") as logs:
            w, _ = one_step(lambda: vrgd_tf.VRGDSGD(LR, statistics_interval=1), replica_step)
        self.assert_step(w, WEIGHTED_SUM)
        self.assertRegex("\n".join(logs.output), "no variable had a defined GSNR")

        again = vrgd_tf.GSNRAggregator(gamma=GAMMA, name="second", statistics_interval=1)

        def twice(aggregator, optimizer, w, x):
            shares = aggregator(local_gradient(w, x), [w])
            optimizer.apply_gradients(zip(again(shares, [w]), [w]))

        w, _ = one_step(lambda: keras.optimizers.SGD(LR), twice, also_build=[again])
        self.assert_step(w, WEIGHTED_SUM)

    def test_one_replica_the_share_is_the_sum(self):
        """With one replica nothing changes: the output is the sum, bit for bit."""
        strategy = util.strategy_for(1)
        with strategy.scope():
            w = tf.Variable(INIT, name="w")
            first, second = (
                vrgd_tf.GSNRAggregator(gamma=GAMMA, statistics_interval=1) for _ in range(2)
            )
            first.build([w])
            second.build([w])
        g = tf.constant(GRADS[0])

        @tf.function
        def both():
            return strategy.run(lambda: (first([g], [w])[0], second._aggregate_sum([g], [w])[0]))

        share, summed = both()
        self.assertAllEqual(share, summed)
        self.assertAllEqual(share, GRADS[0])


class TfKerasContractTest(tf.test.TestCase, parameterized.TestCase):
    """tf_keras optimizers in the same custom loop (``vrgd_tf.tf_keras`` imported here; the
    case without it runs in a fresh process)."""

    def setUp(self):
        super().setUp()
        util.skip_without_tf_keras(self)

    def assert_step(self, w, update, rtol=1e-5):
        ContractTest.assert_step(self, w, update, rtol)

    def test_default_apply_gradients(self):
        """tf_keras SGD's default ``apply_gradients`` (it all-reduces) of the output after
        each transform (one variable each, one step), with ``vrgd_tf.tf_keras`` imported
        (main: refused untouched, 4x otherwise)."""
        import tf_keras

        import vrgd_tf.tf_keras  # noqa: F401

        transforms = sorted(TRANSFORMS)

        def replica_step(aggregator, optimizer, ws, x):
            shares = aggregator(local_gradient(ws, x), ws)
            transformed = [TRANSFORMS[t](g) for t, g in zip(transforms, shares)]
            optimizer.apply_gradients(zip(transformed, ws))

        ws, _ = one_step(
            lambda: tf_keras.optimizers.legacy.SGD(LR),
            replica_step,
            legacy=True,
            count=len(transforms),
        )
        for transform, w in zip(transforms, ws):
            with self.subTest(transform=transform):
                self.assert_step(w, WEIGHTED_SUM, rtol=RTOL.get(transform, 1e-5))

    def test_loss_scale_optimizer_unscaling(self):
        """tf_keras mixed-precision custom loop: ``get_scaled_loss``, the aggregator,
        ``get_unscaled_gradients``, ``apply_gradients`` (main: 4x)."""
        import tf_keras

        def replica_step(aggregator, optimizer, w, x):
            shares = aggregator(local_gradient(w, x, optimizer.get_scaled_loss), [w])
            optimizer.apply_gradients(zip(optimizer.get_unscaled_gradients(shares), [w]))

        w, _ = one_step(
            lambda: tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.legacy.SGD(LR)),
            replica_step,
            legacy=True,
        )
        self.assert_step(w, WEIGHTED_SUM)

    def test_global_clipnorm_clips_the_sum(self):
        """tf_keras clips after its all-reduce: ``global_clipnorm=c`` clips the
        variance-reduced sum at ``c`` (the aggregator's docstring)."""
        import tf_keras

        def replica_step(aggregator, optimizer, w, x):
            optimizer.apply_gradients(zip(aggregator(local_gradient(w, x), [w]), [w]))

        w, _ = one_step(
            lambda: tf_keras.optimizers.legacy.SGD(LR, global_clipnorm=0.3),
            replica_step,
            legacy=True,
        )
        self.assert_step(w, clip_np(WEIGHTED_SUM, 0.3))

    def test_skipping_the_all_reduce_steps_r_times_short(self):
        """The documented limitation: a plain tf_keras optimizer told that the shares are
        already summed (``experimental_aggregate_gradients=False``) applies one share,
        ``R`` times short, not too far."""
        import tf_keras

        def replica_step(aggregator, optimizer, w, x):
            shares = aggregator(local_gradient(w, x), [w])
            optimizer.apply_gradients(zip(shares, [w]), experimental_aggregate_gradients=False)

        w, _ = one_step(lambda: tf_keras.optimizers.legacy.SGD(LR), replica_step, legacy=True)
        self.assert_step(w, WEIGHTED_SUM / R)

    def test_vrgd_optimizer_refuses_to_skip_its_aggregation_for_shares(self):
        """A VRGD tf_keras optimizer's ``experimental_aggregate_gradients=False`` accepts
        only what its own aggregation returned (a per-instance check)."""
        from vrgd_tf import tf_keras as vtk

        def replica_step(aggregator, optimizer, w, x):
            shares = aggregator(local_gradient(w, x), [w])
            optimizer.apply_gradients(zip(shares, [w]), experimental_aggregate_gradients=False)

        with self.assertRaisesRegex(
            ValueError, r"experimental_aggregate_gradients=False.*GSNRAggregator.*share"
        ):
            one_step(lambda: vtk.VRGDSGD(LR, statistics_interval=1), replica_step, legacy=True)


#: tf_keras ``apply_gradients`` of the untouched output in a process that never imports
#: ``vrgd_tf.tf_keras`` (the guide's custom loop does not). Prints the step's ratio.
_WITHOUT_VRGD_TF_KERAS = """
import sys
sys.path.insert(0, {tests!r})
import conftest  # noqa: F401  (8 logical CPUs)
import numpy as np
import tensorflow as tf
import tf_keras
import util
import vrgd_tf
import test_aggregator_contract as t

def replica_step(aggregator, optimizer, w, x):
    optimizer.apply_gradients(zip(aggregator(t.local_gradient(w, x), [w]), [w]))

w, _ = t.one_step(lambda: tf_keras.optimizers.legacy.SGD(t.LR), replica_step, legacy=True)
assert "vrgd_tf.tf_keras" not in sys.modules
print("RATIO", np.linalg.norm(t.INIT - w) / np.linalg.norm(t.LR * t.WEIGHTED_SUM))
print("CLOSE", np.allclose(t.INIT - w, t.LR * t.WEIGHTED_SUM, rtol=1e-5, atol=1e-6))
"""


class WithoutVrgdTfKerasTest(tf.test.TestCase):
    def test_tf_keras_apply_gradients_without_vrgd_tf_tf_keras(self):
        """tf_keras default ``apply_gradients`` of the output when ``vrgd_tf.tf_keras`` was
        never imported: the variance-reduced sum once (main: 4x, no message)."""
        util.skip_without_tf_keras(self)
        tests = os.path.dirname(os.path.abspath(__file__))
        path = [tests] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
        run = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(_WITHOUT_VRGD_TF_KERAS.format(tests=tests))],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        self.assertEqual(run.returncode, 0, run.stderr[-3000:])
        self.assertIn("CLOSE True", run.stdout, run.stdout)


class NoProcessWidePatchTest(tf.test.TestCase):
    """Importing vrgd_tf (and vrgd_tf.tf_keras) leaves Keras 3's ``Optimizer.apply`` and
    ``LossScaleOptimizer.apply`` and tf_keras' ``OptimizerV2._aggregate_gradients`` as the
    frameworks define them: the contract needs no guard."""

    def test_apply_and_aggregate_gradients_are_the_frameworks_own(self):
        from keras.src.optimizers import base_optimizer

        methods = [base_optimizer.BaseOptimizer.apply, keras.optimizers.LossScaleOptimizer.apply]
        if util.HAS_TF_KERAS:
            import tf_keras

            import vrgd_tf.tf_keras  # noqa: F401

            methods.append(tf_keras.optimizers.legacy.Optimizer._aggregate_gradients)
        for method in methods:
            self.assertIsNone(getattr(method, "vrgd_wraps", None), method.__qualname__)
            self.assertFalse(method.__module__.startswith("vrgd_tf"), method.__qualname__)


if __name__ == "__main__":
    tf.test.main()
