"""Closed-form VRGD cases worked out by hand, independent of tests/numpy_reference.py.

Notation (docs/spec.md sections 1 to 3): k replicas hand the optimizer ``x_d``;
``S1 = sum_d x_d``, ``S2 = sum_d x_d**2``; GSNR ``r = S1**2 / (k S2 - S1**2)``; per
variable ``f = clip(r / mean(r), gamma, 1)`` (mean over the elements with a defined r);
with ``beta_3 > 0``, ``p_t = beta_3 p_{t-1} + (1 - beta_3) f_t``,
``p_hat_t = p_t / (1 - beta_3**t)``; the summed gradient handed to the base rule is
``u = p_hat * S1`` (``f * S1`` for ``beta_3 = 0``).

For k = 2 and replica values (a, b): ``S1 = a + b``, ``k S2 - S1**2 = (a - b)**2``, so
``r = (a + b)**2 / (a - b)**2``.

The numbers below are exact in binary or differ from their float32 value by rounding only,
hence the tight tolerances.
"""

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

import vrgd_tf
from vrgd_tf import gsnr
from vrgd_tf import tf_keras as vtk
from vrgd_tf.gsnr import factors, smoothing, statistics

import util

TOL = dict(rtol=1e-6, atol=1e-6)
# norm_ratio ||f * S1|| / ||S1|| of the two hand-computed cases below.
NR1 = float(np.sqrt(0.832))  # S1 = (4, 2), f = (1, 0.4)
NR3 = float(np.sqrt(0.904))  # S1 = (2, 6), f = (0.2, 1)

# family -> (VRGDSGD class, make_variable for util.run_custom_loop)
FAMILIES = {
    "keras3": (vrgd_tf.VRGDSGD, None),
    "tf_keras": (vtk.VRGDSGD, lambda n, v: tf.Variable(v, name=n)),
}
FAMILY_PARAMS = [(f"_{name}", name) for name in sorted(FAMILIES)]


def _grads(*steps):
    """``{"w": float32 [steps, k, 2]}`` from per step, per replica 2-vectors."""
    return {"w": np.asarray(steps, np.float32)}


def _statistics(opt):
    """The recorded diagnostics of the single variable, as a list in STATISTICS_FIELDS order."""
    stats = opt.vrgd_statistics()
    assert len(stats) == 1, stats
    row = next(iter(stats.values()))
    return [row[f] for f in gsnr.STATISTICS_FIELDS]


class GsnrFunctionsTest(tf.test.TestCase):
    def test_gsnr_factor_two_replicas(self):
        """Replicas (1, 0) and (3, 2), gamma = 0.1:
        S1 = (4, 2), S2 = (1 + 9, 0 + 4) = (10, 4);
        r = S1**2 / (2 S2 - S1**2) = (16 / (20 - 16), 4 / (8 - 4)) = (4, 1); mean(r) = 2.5;
        r / mean = (1.6, 0.4) -> factor clip(., 0.1, 1) = (1, 0.4).
        Diagnostics: mean_gsnr 2.5, frac_at_gamma 0 (0.4 > 0.1), frac_at_one 1/2,
        mean_factor (1 + 0.4) / 2 = 0.7. Output u = factor * S1 = (4, 0.8).
        norm_ratio = ||u|| / ||S1|| = sqrt(4**2 + 0.8**2) / sqrt(4**2 + 2**2)
                   = sqrt(16.64 / 20) = sqrt(0.832) = 0.91214..."""
        s1 = tf.constant([4.0, 2.0])
        s2 = tf.constant([10.0, 4.0])
        factor, stats = gsnr.gsnr_factor(s1, s2, 2, 0.1)
        self.assertAllClose(factor, [1.0, 0.4], **TOL)
        self.assertAllClose(factor * s1, [4.0, 0.8], **TOL)
        self.assertAllClose(stats.stack(), [2.5, 0.0, 0.5, 0.7, NR1], **TOL)

    def test_gsnr_factors_flat_normalises_each_variable_by_its_own_mean(self):
        """Two variables in one flat buffer, k = 2, gamma = 0.1.

        A: replicas (1, 0) and (3, 2): as above, r = (4, 1), factor (1, 0.4),
           diagnostics (2.5, 0, 1/2, 0.7).
        B: replicas (1, 0, 0) and (-1, 0, 2): S1 = (0, 0, 2), S2 = (2, 0, 4).
           element 1: r = 0 / (4 - 0) = 0 (defined: the replicas differ);
           element 2: both replicas 0, no variance: undefined, factor 1, not in the mean;
           element 3: r = 4 / (8 - 4) = 1.
           mean(r) over the defined = (0 + 1) / 2 = 0.5; r / mean = (0, -, 2)
           -> factor (0.1, 1, 1); diagnostics: mean_gsnr 0.5, frac_at_gamma 1/3,
           frac_at_one 2/3, mean_factor (0.1 + 1 + 1) / 3 = 0.7; norm_ratio: the only
           nonzero S1 element has factor 1, so ||(0, 0, 2)|| / ||(0, 0, 2)|| = 1.
        A mean over both variables (4, 1, 0, 1 -> 1.5) would give A (1, 2/3)."""
        s1 = tf.constant([4.0, 2.0, 0.0, 0.0, 2.0])
        s2 = tf.constant([10.0, 4.0, 2.0, 0.0, 4.0])
        factor, stats = statistics.gsnr_factors_flat(s1, s2, [2, 3], 2, 0.1)
        self.assertAllClose(factor, [1.0, 0.4, 0.1, 1.0, 1.0], **TOL)
        self.assertAllClose(
            stats, [[2.5, 0.0, 0.5, 0.7, NR1], [0.5, 1.0 / 3.0, 2.0 / 3.0, 0.7, 1.0]], **TOL
        )

    def test_frac_at_gamma_counts_factor_equal_to_gamma(self):
        """frac_at_gamma counts r / mean(r) <= gamma, not < gamma.

        k = 2, S1 = (2, 6), S2 = (4, 20), gamma = 0.2:
        r = (4 / (8 - 4), 36 / (40 - 36)) = (1, 9); mean(r) = 5; r / mean = (0.2, 1.8)
        -> factor (0.2, 1). Element 1 sits exactly at gamma (1/5 rounds to the same
        float32 as 0.2), so frac_at_gamma = 1/2 (a strict < would give 0);
        mean_gsnr 5, frac_at_one 1/2, mean_factor 0.6; norm_ratio
        sqrt((0.2 * 2)**2 + 6**2) / sqrt(2**2 + 6**2) = sqrt(36.16 / 40) = sqrt(0.904)."""
        s1 = tf.constant([2.0, 6.0])
        s2 = tf.constant([4.0, 20.0])
        factor, stats = gsnr.gsnr_factor(s1, s2, 2, 0.2)
        self.assertAllClose(factor, [0.2, 1.0], **TOL)
        self.assertAllClose(stats.stack(), [5.0, 0.5, 0.5, 0.6, NR3], **TOL)
        _, flat_stats = statistics.gsnr_factors_flat(s1, s2, [2], 2, 0.2)
        self.assertAllClose(flat_stats, [[5.0, 0.5, 0.5, 0.6, NR3]], **TOL)

    def test_norm_ratio_k2_by_hand(self):
        """The update norm ratio, k = 2, replica gradients (1, 0) and (3, 2), gamma = 0.1:
        S1 = (4, 2), S2 = (1 + 9, 0 + 4) = (10, 4);
        r = S1**2 / (k S2 - S1**2) = (16 / 4, 4 / 4) = (4, 1); mean(r) = 2.5;
        f = clip((1.6, 0.4), 0.1, 1) = (1, 0.4); u = f * S1 = (4, 0.8);
        ||u||**2 = 16 + 0.64 = 16.64, ||S1||**2 = 16 + 4 = 20,
        norm_ratio = sqrt(16.64 / 20) = sqrt(0.832) = 0.912140..., between gamma and 1 and
        above mean_factor 0.7 (the big element keeps its full gradient)."""
        _, stats = gsnr.gsnr_factor(tf.constant([4.0, 2.0]), tf.constant([10.0, 4.0]), 2, 0.1)
        self.assertAllClose(stats.norm_ratio, 0.9121403, **TOL)
        self.assertAllClose(stats.norm_ratio, np.sqrt(16.64 / 20.0), **TOL)

    def test_norm_ratio_is_one_when_the_summed_gradient_is_zero(self):
        """Replicas (1, -2) and (-1, 2): S1 = (0, 0), S2 = (2, 8); r = (0, 0) is defined but
        mean(r) = 0, so f = 1; ||S1|| = 0 -> norm_ratio 1 by definition (no 0 / 0)."""
        _, stats = gsnr.gsnr_factor(tf.constant([0.0, 0.0]), tf.constant([2.0, 8.0]), 2, 0.1)
        self.assertAllClose(stats.stack(), [0.0, 0.0, 1.0, 1.0, 1.0], **TOL)

    def test_norm_ratio_huge_gradients_do_not_overflow(self):
        """k = 2, S1 = (1.5e19, 1.5e19, 0.5e19), S2 = (1.25e38, 1.25e38, 2.5e37): each square
        fits float32 but ||S1||**2 = 4.75e38 does not. r = S1**2 / (2 S2 - S1**2) =
        (2.25 / 0.25, 2.25 / 0.25, 0.25 / 0.25) = (9, 9, 1); mean 19 / 3; r / mean =
        (27/19, 27/19, 3/19) -> f = (1, 1, 3/19);
        norm_ratio**2 = (2.25 + 2.25 + 0.25 (3/19)**2) / 4.75 = 0.94868...; finite."""
        s1 = tf.constant([1.5e19, 1.5e19, 0.5e19])
        s2 = tf.constant([1.25e38, 1.25e38, 2.5e37])
        factor, stats = gsnr.gsnr_factor(s1, s2, 2, 0.1)
        self.assertAllClose(factor, [1.0, 1.0, 3.0 / 19.0], rtol=1e-5)
        expected = np.sqrt((4.5 + 0.25 * (3.0 / 19.0) ** 2) / 4.75)
        self.assertAllClose(stats.norm_ratio, expected, rtol=1e-5)

    def test_norm_ratio_tiny_gradients_do_not_underflow(self):
        """S1 = (3e-25, 4e-25): S1**2 underflows float32, but the ratio does not depend on
        the scale. With the applied factor (0.5, 1) (as after factor momentum),
        norm_ratio**2 = (0.25 * 9 + 16) / 25 = 0.73, norm_ratio = 0.8544; it read 1 (the
        S1 = 0 case) when the norms were taken from the underflowed squares."""
        s1 = tf.constant([3e-25, 4e-25])
        factor = factors.factor(s1, tf.zeros([2]), 2, 0.1, gsnr.NOISE_RTOL * 2)
        stats = statistics.statistics(
            [s1], [factor], [tf.constant([0.5, 1.0])], k=2, gamma=0.1, sizes=[2]
        )
        self.assertAllClose(stats[0, gsnr.STATISTICS_FIELDS.index("norm_ratio")], 0.73**0.5)

    def test_smooth_factor_bias_correction_three_steps(self):
        """beta_3 = 0.5; element A gets the factors 1, 1, 1 and element B 0.2, 1, 0.4.

        p_t = 0.5 p_{t-1} + 0.5 f_t (p_0 = 0), c_t = 1 - 0.5**t, p_hat_t = p_t / c_t:
          t = 1: p = 0.1,                   c = 0.5,   p_hat = 0.2
          t = 2: p = 0.05 + 0.5 = 0.55,     c = 0.75,  p_hat = 11/15
          t = 3: p = 0.275 + 0.2 = 0.475,   c = 0.875, p_hat = 19/35
        A: p_hat = 1 exactly on every step. The state is the deficit d_t = c_t - p_t
        (B: 0.4, 0.2, 0.4; A: 0) and c_t."""
        deficit = tf.zeros([2])
        correction = tf.zeros([])
        expected = [(0.2, 0.4, 0.5), (11.0 / 15.0, 0.2, 0.75), (19.0 / 35.0, 0.4, 0.875)]
        for f_b, (p_hat_b, d_b, c) in zip([0.2, 1.0, 0.4], expected):
            p_hat, deficit, correction = smoothing.smooth_factor(
                tf.constant([1.0, f_b]), deficit, correction, 0.5, 0.1
            )
            self.assertAllClose(p_hat, [1.0, p_hat_b], **TOL)
            self.assertEqual(float(p_hat[0]), 1.0)
            self.assertAllClose(deficit, [0.0, d_b], **TOL)
            self.assertAllClose(correction, c, **TOL)


class OptimizerClosedFormTest(tf.test.TestCase, parameterized.TestCase):
    """The same cases through VRGDSGD(learning_rate=1) on 2 replicas: the weight moves by
    exactly -u, the variance-reduced summed gradient."""

    @parameterized.named_parameters(FAMILY_PARAMS)
    def test_sgd_step_is_minus_factor_times_sum(self, family):
        """Replicas (1, 0) and (3, 2), gamma = 0.1, momentum 0: u = (4, 0.8) (see
        GsnrFunctionsTest.test_gsnr_factor_two_replicas), so w: (0, 0) -> (-4, -0.8);
        diagnostics (2.5, 0, 1/2, 0.7, sqrt(0.832))."""
        cls, make_variable = FAMILIES[family]
        variables, opt = util.run_custom_loop(
            util.strategy_for(2),
            lambda: cls(learning_rate=1.0, momentum=0.0, gamma=0.1, statistics_interval=1),
            {"w": np.zeros(2, np.float32)},
            _grads([[1.0, 0.0], [3.0, 2.0]]),
            make_variable=make_variable,
        )
        self.assertEqual(opt.beta_3, 0.0)
        self.assertAllClose(variables["w"].numpy(), [-4.0, -0.8], **TOL)
        self.assertAllClose(_statistics(opt), [2.5, 0.0, 0.5, 0.7, NR1], **TOL)

    @parameterized.named_parameters(FAMILY_PARAMS)
    def test_factor_momentum_bias_correction_through_sgd(self, family):
        """VRGDSGD(learning_rate=1, gamma=0.1, beta_3=0.5), 3 steps; per element
        (A, B), replica 0 and replica 1 values, r = (a + b)**2 / (a - b)**2:
          step 1: A (2, 1): S1 = 3, r = 9;  B (1, 0): S1 = 1, r = 1.
                  mean 5 -> f = (1, 0.2);   p_hat = (1, 0.2);   dw = -(3, 0.2)
          step 2: A (2, 1): S1 = 3, r = 9;  B (4, 2): S1 = 6, r = 36 / 4 = 9.
                  mean 9 -> f = (1, 1);     p_hat = (1, 11/15); dw = -(3, 4.4)
          step 3: A (3, 1): S1 = 4, r = 4;  B (1, 0): S1 = 1, r = 1.
                  mean 2.5 -> f = (1, 0.4); p_hat = (1, 19/35); dw = -(4, 19/35)
        (p_hat from GsnrFunctionsTest.test_smooth_factor_bias_correction_three_steps.)
        Without bias correction step 1 alone would move B by 0.1, not 0.2."""
        cls, make_variable = FAMILIES[family]
        grads = _grads([[2.0, 1.0], [1.0, 0.0]], [[2.0, 4.0], [1.0, 2.0]], [[3.0, 1.0], [1.0, 0.0]])
        expected_steps = [[-3.0, -0.2], [-3.0, -4.4], [-4.0, -19.0 / 35.0]]
        w = np.zeros(2)
        for i, variables, _ in util.custom_loop_steps(
            util.strategy_for(2),
            lambda: cls(learning_rate=1.0, gamma=0.1, beta_3=0.5, statistics_interval=1),
            {"w": np.zeros(2, np.float32)},
            grads,
            make_variable=make_variable,
        ):
            new_w = variables["w"].numpy()
            self.assertAllClose(new_w - w, expected_steps[i], rtol=1e-6, atol=2e-6, msg=f"step {i}")
            w = new_w

    @parameterized.named_parameters(FAMILY_PARAMS)
    def test_frac_at_gamma_counts_factor_equal_to_gamma_through_sgd(self, family):
        """Replicas (2, 4) and (0, 2), gamma = 0.2: S1 = (2, 6), S2 = (4, 20), the case of
        GsnrFunctionsTest.test_frac_at_gamma_counts_factor_equal_to_gamma: factor (0.2, 1),
        dw = -(0.4, 6), diagnostics (5, 1/2, 1/2, 0.6, sqrt(0.904))."""
        cls, make_variable = FAMILIES[family]
        variables, opt = util.run_custom_loop(
            util.strategy_for(2),
            lambda: cls(learning_rate=1.0, gamma=0.2, statistics_interval=1),
            {"w": np.zeros(2, np.float32)},
            _grads([[2.0, 4.0], [0.0, 2.0]]),
            make_variable=make_variable,
        )
        self.assertAllClose(variables["w"].numpy(), [-0.4, -6.0], **TOL)
        self.assertAllClose(_statistics(opt), [5.0, 0.5, 0.5, 0.6, NR3], **TOL)

    @parameterized.named_parameters(FAMILY_PARAMS)
    def test_statistics_interval_two_records_the_step_that_brings_iterations_to_two(self, family):
        """statistics_interval=2, gamma=0.1, 3 steps whose diagnostics all differ:
          step 0: replicas (1, 0), (3, 2): r = (4, 1), mean 2.5, f = (1, 0.4)
                  -> (2.5, 0, 1/2, 0.7, sqrt(0.832))
          step 1: replicas (2, 4), (0, 2): r = (1, 9), mean 5, f = (0.2, 1)
                  -> (5, 0, 1/2, 0.6, sqrt(0.904))
          step 2: replicas (1, 1), (-1, 0): A: S1 = 0, r = 0; B: S1 = 1, r = 1;
                  mean 0.5, r / mean = (0, 2), f = (0.1, 1) -> (0.5, 1/2, 1/2, 0.55, 1)
                  (norm_ratio: u = (0, 1) and S1 = (0, 1))
        Recorded: after step 0 nothing yet (iterations 1), after step 1 step 1's
        (iterations 2), after step 2 still step 1's (iterations 3)."""
        cls, make_variable = FAMILIES[family]
        grads = _grads(
            [[1.0, 0.0], [3.0, 2.0]], [[2.0, 4.0], [0.0, 2.0]], [[1.0, 1.0], [-1.0, 0.0]]
        )
        step_1 = [5.0, 0.0, 0.5, 0.6, NR3]
        expected = [[0.0] * statistics.NUM_STATISTICS, step_1, step_1]
        expected_w = [[-4.0, -0.8], [-4.4, -6.8], [-4.4, -7.8]]
        for i, variables, opt in util.custom_loop_steps(
            util.strategy_for(2),
            lambda: cls(learning_rate=1.0, gamma=0.1, statistics_interval=2),
            {"w": np.zeros(2, np.float32)},
            grads,
            make_variable=make_variable,
        ):
            self.assertEqual(int(opt.iterations.numpy()), i + 1)
            self.assertAllClose(_statistics(opt), expected[i], **TOL, msg=f"after step {i}")
            self.assertAllClose(variables["w"].numpy(), expected_w[i], **TOL, msg=f"after step {i}")

    @parameterized.named_parameters(FAMILY_PARAMS)
    def test_statistics_interval_one_records_every_step(self, family):
        """statistics_interval=1 on the same data: each step's own diagnostics
        (step 2: (0.5, 1/2, 1/2, 0.55, 1), see the test above)."""
        cls, make_variable = FAMILIES[family]
        grads = _grads(
            [[1.0, 0.0], [3.0, 2.0]], [[2.0, 4.0], [0.0, 2.0]], [[1.0, 1.0], [-1.0, 0.0]]
        )
        expected = [
            [2.5, 0.0, 0.5, 0.7, NR1],
            [5.0, 0.0, 0.5, 0.6, NR3],
            [0.5, 0.5, 0.5, 0.55, 1.0],
        ]
        for i, _, opt in util.custom_loop_steps(
            util.strategy_for(2),
            lambda: cls(learning_rate=1.0, gamma=0.1, statistics_interval=1),
            {"w": np.zeros(2, np.float32)},
            grads,
            make_variable=make_variable,
        ):
            self.assertAllClose(_statistics(opt), expected[i], **TOL, msg=f"after step {i}")


if __name__ == "__main__":
    tf.test.main()
