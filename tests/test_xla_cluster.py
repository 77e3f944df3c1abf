"""``xla_cluster``: in graph mode the GSNR math runs as one XLA cluster (``"always"``, or
``"auto"`` from ``XLA_CLUSTER_MIN`` elements) with the values of the step run op by op
(``"never"``) to float32 rounding, the base bit for bit at ``gamma=1, beta_3=0``, and only
the outputs and per-variable scalars leave the cluster on a step that does not record."""

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

import vrgd_tf
from vrgd_tf import devices, settings
from vrgd_tf.gsnr import options
from vrgd_tf.gsnr.statistics import NUM_STATISTICS

STRATEGY = devices.cpu_strategy(2)
SHAPES = ([40, 30], [30], [64, 8], [7])  # [64, 8]: an embedding with a sparse gradient


def _variables(shapes=SHAPES):
    with STRATEGY.scope():
        return [
            tf.Variable(tf.random.stateless_normal(s, [1, i]), name=f"v{i}")
            for i, s in enumerate(shapes)
        ]


def _gradients(x, variables):
    """Replica-dependent gradients; the third one a ``tf.IndexedSlices`` of 3 rows."""
    out = []
    for i, v in enumerate(variables):
        n = v.shape.num_elements()
        g = tf.sin(x * tf.cast(tf.range(n), tf.float32) * (0.1 + i)) * (1.0 + i)
        if i == 2 and v.shape.rank == 2:
            rows = tf.reshape(g[: 3 * v.shape[1]], [3, v.shape[1]])
            g = tf.IndexedSlices(rows, tf.cast(x, tf.int64) * 2 + tf.constant([0, 5, 9], tf.int64))
        else:
            g = tf.reshape(g, v.shape)
        out.append(g)
    return out


def _run(steps=4, shapes=SHAPES, **kwargs):
    """``steps`` GSNR steps over 2 replicas in one ``tf.function``: the summed outputs per
    step, the state and the statistics."""
    variables = _variables(shapes)
    with STRATEGY.scope():
        aggregator = vrgd_tf.GSNRAggregator(**kwargs)
        aggregator.build(variables)

    @tf.function
    def step(x):
        def replica(x):
            return [
                tf.convert_to_tensor(g) for g in aggregator(_gradients(x, variables), variables)
            ]

        return [STRATEGY.reduce("SUM", o, axis=None) for o in STRATEGY.run(replica, args=(x,))]

    x = STRATEGY.experimental_distribute_values_from_function(
        lambda ctx: tf.constant(1.0 + ctx.replica_id_in_sync_group)
    )
    outputs = [[o.numpy() for o in step(x)] for _ in range(steps)]
    return outputs, aggregator.statistics(), step.get_concrete_function(x).graph


def _clusters(graph):
    """The XLA clusters in ``graph`` (and the functions it calls)."""
    found, seen = [], set()

    def visit(g):
        for op in g.get_operations():
            try:
                if op.get_attr("_XlaMustCompile"):
                    found.append(op)
            except ValueError:
                pass
        for f in getattr(g, "_functions", {}).values():
            if f.name not in seen and hasattr(f, "graph"):
                seen.add(f.name)
                visit(f.graph)

    visit(graph)
    return found


class XlaClusterTest(tf.test.TestCase, parameterized.TestCase):
    @parameterized.parameters(
        (0.0, 1, "float32"),
        (0.9, 1, "float32"),
        (0.9, 2, "float32"),  # the recording step takes the factors again outside
        (0.9, 2, "bfloat16"),  # stored d_t rounded: the cluster hands its factors out
    )
    def test_always_equals_never_to_float32_rounding(self, beta_3, interval, state_dtype):
        kwargs = dict(gamma=0.1, beta_3=beta_3, statistics_interval=interval)
        kwargs["state_dtype"] = state_dtype
        plain, stats, graph = _run(xla_cluster="never", **kwargs)
        fused, fused_stats, fused_graph = _run(xla_cluster="always", **kwargs)
        self.assertEmpty(_clusters(graph))
        self.assertNotEmpty(_clusters(fused_graph))
        for a, b in zip(plain, fused):
            for x, y in zip(a, b):
                self.assertAllClose(x, y, rtol=1e-5, atol=1e-6)
        self.assertFalse(np.array_equal(plain[-1][0], np.ones_like(plain[-1][0])))
        self.assertEqual(sorted(stats), sorted(fused_stats))
        for name in stats:
            for key, value in stats[name].items():
                self.assertAllClose(value, fused_stats[name][key], rtol=1e-5, atol=1e-6)
        self.assertLess(stats["v0"]["mean_factor"], 0.99)  # the factors are not all 1

    def test_gamma_one_beta_3_zero_is_the_base_bit_for_bit(self):
        base, _, _ = _run(gamma=1.0, steps=1, xla_cluster="never")
        fused, _, graph = _run(gamma=1.0, steps=1, xla_cluster="always")
        self.assertNotEmpty(_clusters(graph))
        for x, y in zip(base[0], fused[0]):
            self.assertAllEqual(x, y)

    def test_auto_clusters_from_xla_cluster_min_elements(self):
        self.assertEqual(options.XLA_CLUSTER_MIN, 2**18)
        small, large = [[2**17 - 4], [2**17 - 4], [4]], [[2**17 - 4], [2**17 - 4], [8]]
        for shapes, kwargs, want in (
            (small, {}, 0),
            (large, {}, 1),  # 2**18 elements
            (large, dict(xla_cluster="never"), 0),
            (large, dict(factor_transforms=lambda f, c: f), 0),
            (small, dict(xla_cluster=True), 1),
        ):
            _, _, graph = _run(steps=1, shapes=shapes, **kwargs)
            # One cluster per replica.
            self.assertLen(_clusters(graph), 2 * want, (shapes, kwargs))

    @parameterized.parameters(2, 1)
    def test_only_outputs_and_scalars_leave_the_cluster(self, interval):
        _, _, graph = _run(steps=1, beta_3=0.9, statistics_interval=interval, xla_cluster=True)
        cluster = _clusters(graph)[0]
        sizes = sorted(o.shape.num_elements() for o in cluster.outputs)
        # The dense outputs (1200 and 30 elements) and the sparse rows' output (the 6 rows
        # the replicas touched, 48 elements); recording on some steps, also the sparse
        # rows' raw and applied factors; recording on every step, the rows of the
        # diagnostics (4 variables) instead. No factor of the dense pack (1237 elements).
        if interval == 1:
            want = [30, 48, 4 * NUM_STATISTICS, 1200]
        else:
            want = [30, 48, 48, 48, 1200]
        self.assertEqual([s for s in sizes if s >= 4 * NUM_STATISTICS], sorted(want))

    def test_the_setting(self):
        self.assertEqual(settings.DEFAULTS.xla_cluster, "auto")
        self.assertEqual(settings.VRGDSettings(xla_cluster=True).xla_cluster, "always")
        self.assertEqual(settings.VRGDSettings(xla_cluster=False).xla_cluster, "never")
        with self.assertRaisesRegex(ValueError, "`xla_cluster` must be one of 'auto'"):
            settings.VRGDSettings(xla_cluster="sometimes")
        aggregator = vrgd_tf.GSNRAggregator(xla_cluster="never")
        config = aggregator.get_config()
        self.assertEqual(config["xla_cluster"], "never")
        self.assertEqual(vrgd_tf.GSNRAggregator.from_config(config).xla_cluster, "never")


if __name__ == "__main__":
    tf.test.main()
