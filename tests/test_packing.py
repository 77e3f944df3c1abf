"""The pack (vrgd_tf.gsnr.layout.Block, vrgd_tf.gsnr.packing): the dense gradients of at most
``pack_limit`` elements share one buffer in the GSNR step, which then runs its element-wise
ops once for all of them. It changes no value: the collectives get the same tensors as
without it (one per variable, so any strategy sums them in the same order), and the
gradients, the factor momentum, the diagnostics and the split-half rows are those of the
unpacked step bit for bit (outside XLA; under XLA to float32 rounding), on 4 logical CPU
replicas with ``beta_3 = 0.9``, with and without
factor transforms, with more than 8 variables and a large one first (a row's position
changes the last bit of a division by constants). And it is what makes a model of many small
variables cheap: the step's graph has far fewer ops per variable."""

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

from vrgd_tf import gsnr
from vrgd_tf.gsnr import layout as layout_lib
from vrgd_tf.gsnr import state as state_lib

import util

K = 4
#: (shape, dtype): small float32 and bfloat16 variables (packed), one above the limit and one
#: float64 (each its own block).
VARIABLES = [
    ((256,), tf.float32),
    ((16, 32), tf.float32),
    ((20000,), tf.float32),
    ((5,), tf.bfloat16),
    ((3, 3, 4), tf.float32),
    ((6,), tf.float64),
    ((7,), tf.float32),
]


def layout_of(variables, pack_limit=layout_lib.PACK_LIMIT):
    grads = [tf.zeros(s, d) for s, d in variables]
    return layout_lib.build_layout(
        grads,
        [tf.Variable(g) for g in grads],
        None,
        num_replicas=K,
        num_groups=1,
        squares_given=False,
        pack_limit=pack_limit,
    )


class LayoutTest(tf.test.TestCase):
    def test_small_dense_entries_share_one_block(self):
        layout = layout_of(VARIABLES)
        self.assertEqual(
            [[e.position for e in b.entries] for b in layout.blocks], [[0, 1, 3, 4, 6], [2], [5]]
        )
        pack = layout.blocks[0]
        self.assertTrue(pack.packed)
        self.assertEqual(pack.sizes, (256, 512, 5, 36, 7))
        self.assertEqual([e.offset for e in pack.entries], [0, 256, 768, 773, 809])
        self.assertEqual([e.block for e in layout.entries], [0, 0, 1, 0, 0, 2, 0])
        self.assertEqual([b.index for b in layout.blocks], [0, 1, 2])
        # Entry 2 is the sixth listed block by block (0, 1, 3, 4, 6, 2, 5).
        self.assertEqual(layout.block_order, (0, 1, 5, 2, 3, 6, 4))
        self.assertEqual([b.path for b in layout.blocks], ["dense", "dense", "float64"])

    def test_limit_zero_or_one_small_variable_packs_nothing(self):
        for variables, limit in ((VARIABLES, 0), (VARIABLES[:3], 300)):
            layout = layout_of(variables, limit)
            self.assertEqual(len(layout.blocks), len(variables))
            self.assertFalse(any(b.packed for b in layout.blocks))
            self.assertEqual(layout.block_order, tuple(range(len(variables))))

    def test_pack_limit_is_checked(self):
        self.assertEqual(gsnr.VRGDSettings().pack_limit, layout_lib.PACK_LIMIT)
        with self.assertRaisesRegex(ValueError, "`pack_limit` must be an int >= 0"):
            gsnr.VRGDSettings(pack_limit=-1)
        with self.assertRaisesRegex(TypeError, "`pack_limit` must be an int"):
            gsnr.VRGDSettings(pack_limit=True)


#: The step's variables: a large one first, 12 in all, 9 of them packed.
STEP_VARIABLES = (
    [((17000,), tf.float32)]
    + VARIABLES
    + [
        ((30, 40), tf.float32),
        ((9,), tf.float32),
        ((2,), tf.float32),
        ((1,), tf.float32),
    ]
)


def replica_gradients(seed):
    """Per variable ``[K, *shape]``: a per-element signal and noise over four decades."""
    rng = np.random.RandomState(seed)
    out = []
    for shape, _ in STEP_VARIABLES:
        signal = rng.randn(*shape) * 10.0 ** rng.uniform(-2, 2, shape)
        noise = rng.randn(K, *shape) * 10.0 ** rng.uniform(-2, 2, (K,) + shape)
        out.append(signal + noise)
    return out


def halve_transform(factor, context):
    """A transform that reads its context (a pack hands each variable its own piece)."""
    return factor * (0.5 + 0.5 * tf.cast(context.index % 2, tf.float32)) + 0.0 * tf.reduce_sum(
        context.summed_squares
    )


class Recorder:
    """A replica context that records the shapes and dtypes of what each ``all_reduce``
    call sums, and passes the call on."""

    def __init__(self, context, calls):
        self.context, self.calls = context, calls
        self.num_replicas_in_sync = context.num_replicas_in_sync
        self.replica_id_in_sync_group = context.replica_id_in_sync_group

    def all_reduce(self, op, value):
        self.calls.append([(tuple(v.shape), v.dtype.name) for v in value])
        return self.context.all_reduce(op, value)


class Step:
    """One variable set and its VRGD state on ``strategy``; ``step(grads)`` runs one GSNR
    step on every replica and returns each replica's outputs; ``calls`` records what the
    collectives summed."""

    def __init__(self, strategy, pack_limit, transforms):
        self.calls = []
        with strategy.scope():
            self.variables = [tf.Variable(tf.zeros(s, d)) for s, d in STEP_VARIABLES]
            self.state = gsnr.VRGDState(
                lambda kind, i, shape, _: state_lib.replica_local_variable(shape, f"{kind}{i}"),
                id,
                0.9,
            )
            self.state.add_variables(self.variables)
        settings = gsnr.VRGDSettings(
            beta_3=0.9, split_half=True, pack_limit=pack_limit, factor_transforms=transforms
        )

        @tf.function
        def step(grads):
            def fn():
                ctx = Recorder(tf.distribute.get_replica_context(), self.calls)
                rid = ctx.replica_id_in_sync_group
                mine = [tf.cast(tf.gather(g, rid), d) for g, (_, d) in zip(grads, STEP_VARIABLES)]
                return gsnr.variance_reduce(
                    mine, self.variables, state=self.state, replica_context=ctx, settings=settings
                )

            return strategy.experimental_local_results(strategy.run(fn))

        self.step = step

    def state_values(self):
        s = self.state
        out = {}
        for kind in ("deficits", "corrections", "statistics", "split_half"):
            for i, var in enumerate(getattr(s, kind)):
                out[f"{kind}[{i}]"] = util.replica_values(var)
        return out


class SameValuesTest(tf.test.TestCase, parameterized.TestCase):
    @parameterized.parameters(False, True)
    def test_packed_step_equals_the_unpacked_bit_for_bit(self, with_transforms):
        strategy = util.strategy_for(K)
        transforms = (halve_transform,) if with_transforms else ()
        runs = [Step(strategy, limit, transforms) for limit in (layout_lib.PACK_LIMIT, 0)]
        for seed in range(3):
            grads = [tf.constant(g) for g in replica_gradients(seed)]
            packed, plain = (run.step(grads) for run in runs)
            for replica, (a, b) in enumerate(zip(packed, plain)):
                for i, (x, y) in enumerate(zip(a, b)):
                    self.assertEqual(x.dtype, y.dtype)
                    self.assertAllEqual(x, y, msg=f"step {seed}, replica {replica}, output {i}")
            states = [run.state_values() for run in runs]
            self.assertEqual(sorted(states[0]), sorted(states[1]))
            for name, values in states[0].items():
                for x, y in zip(values, states[1][name]):
                    self.assertAllEqual(x, y, msg=f"step {seed}, {name}")
        # The collectives summed the same tensors: one per variable, packed or not.
        self.assertEqual(runs[0].calls, runs[1].calls)
        # Each replica makes each call (in step): the gradients alone, the squares with the
        # count and stray flag ([2]), the split-half subsample, the float64 gradients.
        calls = [c for i, c in enumerate(runs[0].calls) if i % K == 0]
        self.assertEqual(
            [len(c) for c in calls[:3]], [len(STEP_VARIABLES), len(STEP_VARIABLES) + 1, 1]
        )
        self.assertEqual(calls[1][-1], ((2,), "float32"))
        self.assertTrue(all(c == calls[0] for c in runs[0].calls[:K]))
        stats = runs[0].state_values()
        # The step did something: factors below 1 and reliabilities measured.
        self.assertTrue(any(v[0][3] < 1.0 for k, v in stats.items() if k.startswith("statistics")))
        self.assertTrue(any(v[0][2] > 0 for k, v in stats.items() if k.startswith("split_half")))


def step_graph_ops(num_variables, pack_limit):
    """Graph nodes of one traced GSNR step (2 replicas, diagnostics recorded, beta_3 = 0.9)
    over ``num_variables`` variables of 64 elements."""
    strategy = util.strategy_for(2)
    with strategy.scope():
        variables = [tf.Variable(tf.zeros([64])) for _ in range(num_variables)]
        state = gsnr.VRGDState(
            lambda kind, i, shape, _: state_lib.replica_local_variable(shape, f"{kind}{i}"),
            id,
            0.9,
        )
        state.add_variables(variables)

    @tf.function
    def step():
        def fn():
            grads = [tf.ones([64]) for _ in variables]
            return gsnr.variance_reduce(
                grads,
                variables,
                state=state,
                settings=gsnr.VRGDSettings(beta_3=0.9, pack_limit=pack_limit),
            )

        return strategy.run(fn)

    graph = step.get_concrete_function().graph.as_graph_def()
    return len(graph.node) + sum(len(f.node_def) for f in graph.library.function)


class OpCountTest(tf.test.TestCase):
    def test_packed_ops_per_variable(self):
        """Per extra small variable (both replicas, both branches of the state and the
        diagnostics, constants included) the unpacked step adds 278 graph ops, the packed one
        118: what travels and its squares (one tensor per variable either way), its
        per-variable sums, state reads and writes and output reshape (measured 2026-12-02;
        the bounds leave a margin)."""
        per_variable = {}
        for limit in (0, layout_lib.PACK_LIMIT):
            per_variable[limit] = (step_graph_ops(12, limit) - step_graph_ops(4, limit)) / 8.0
        self.assertGreater(per_variable[0], 2.0 * per_variable[layout_lib.PACK_LIMIT])
        self.assertLess(per_variable[layout_lib.PACK_LIMIT], 130)


class OptimizerTest(tf.test.TestCase):
    def test_a_keras_fit_with_and_without_packing_ends_with_the_same_weights(self):
        """``VRGDLamb`` (``beta_3=0.9``, diagnostics every step) in ``fit`` on 2 replicas:
        the weights and the recorded diagnostics are equal bit for bit with the
        aggregator's ``pack_limit`` at its default and at 0."""
        import keras

        import vrgd_tf

        strategy = util.strategy_for(2)
        rng = np.random.RandomState(0)
        x = rng.randn(256, 6).astype(np.float32)
        y = rng.randint(0, 3, 256).astype(np.int32)
        keras.utils.set_random_seed(0)
        weights = None
        results = []
        for limit in (layout_lib.PACK_LIMIT, 0):
            with strategy.scope():
                model = keras.Sequential(
                    [keras.Input((6,)), keras.layers.Dense(16, activation="relu")]
                    + [keras.layers.LayerNormalization(), keras.layers.Dense(3)]
                )
                optimizer = vrgd_tf.VRGDLamb(
                    1e-2,
                    weight_decay_rate=0.01,
                    beta_3=0.9,
                    pack_limit=limit,
                    statistics_interval=1,
                )
                model.compile(
                    optimizer=optimizer,
                    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                )
            weights = weights or model.get_weights()
            model.set_weights(weights)
            model.fit(x, y, batch_size=64, epochs=2, shuffle=False, verbose=0)
            results.append((model.get_weights(), vrgd_tf.vrgd_statistics(optimizer)))
        self.assertEqual(optimizer.vrgd_aggregator.pack_limit, 0)
        for a, b in zip(results[0][0], results[1][0]):
            self.assertAllEqual(a, b)
        self.assertEqual(list(results[0][1].values()), list(results[1][1].values()))
        with self.assertRaisesRegex(ValueError, "`pack_limit` must be an int >= 0"):
            vrgd_tf.GSNRAggregator(pack_limit=-2, statistics_interval=1)


class XLATest(tf.test.TestCase):
    def test_under_xla_the_pack_agrees_to_float32_rounding(self):
        """Under XLA (one device, 4 micro-batch groups: k = 4) the packed step's outputs,
        diagnostics and factor momentum are the unpacked ones to float32 rounding, not bit for
        bit: XLA orders a reduction's additions as it fuses it (``vrgd_tf.gsnr.packing``).
        Both agree with the step outside XLA."""
        import vrgd_tf

        groups, shapes = 4, [(8, 2), (33,), (5,)]

        def run(limit, parts, jit):
            variables = [tf.Variable(tf.zeros(s)) for s in shapes]
            aggregator = vrgd_tf.GSNRAggregator(beta_3=0.9, pack_limit=limit, statistics_interval=1)
            aggregator.build(variables)

            @tf.function(jit_compile=jit)
            def step(parts):
                grads = [tf.reduce_sum(p, 0) for p in parts]
                squares = [tf.reduce_sum(tf.square(p), 0) for p in parts]
                return aggregator(grads, variables, sq_sums=squares, num_groups=groups)

            for _ in range(2):  # the second step reads the factor momentum
                outputs = step([tf.constant(p) for p in parts])
            state = aggregator.state
            return [o.numpy() for o in outputs] + [
                v.numpy() for v in list(state.statistics) + list(state.deficits)
            ]

        rng = np.random.RandomState(0)
        for seed in range(3):
            parts = [
                (rng.randn(1, *s) + rng.randn(groups, *s) * 10.0 ** rng.uniform(-1, 1, s))
                for s in shapes
            ]
            parts = [p.astype(np.float32) for p in parts]
            eager = run(0, parts, jit=False)
            self.assertGreater(len(eager), 0)
            for limit in (0, layout_lib.PACK_LIMIT):
                for i, (x, y) in enumerate(zip(run(limit, parts, jit=True), eager)):
                    self.assertAllClose(
                        x, y, rtol=1e-5, atol=1e-6, msg=f"seed {seed}, limit {limit}, value {i}"
                    )
            # The step did something: some factor is below 1.
            self.assertLess(np.min(eager[0] / np.sum(parts[0], 0)), 1.0)
