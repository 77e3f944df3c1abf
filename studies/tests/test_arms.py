"""The round-3 control arms (studies/evidence/arms.py) through the public factor_transforms
argument: scalar-VR's step is exactly ``r * S1`` per variable with ``r`` VR's own update
norm ratio; the norm-matched shuffle's step has VR's update norm per variable and is a
permutation of VR's factor before the rescaling; both are the same on every replica, eager
and under XLA (one device, 8 micro-batch groups: the registered layout)."""

import arms
import numpy as np
import tensorflow as tf

import vrgd_tf
from vrgd_tf import devices
from vrgd_tf.gsnr import FactorContext

K = 8
SHAPES = {"kernel": (6, 5), "bias": (5,)}


def problem(seed=0):
    """Per-replica gradients [K, *shape] whose GSNR varies over about 0 to 30."""
    rng = np.random.RandomState(seed)
    grads = {}
    for name, shape in SHAPES.items():
        signal = np.clip(rng.randn(*shape), -2.0, 2.0)
        noise = rng.randn(K, *shape)
        noise = (noise - noise.mean(0)) / noise.std(0)
        scale = np.exp(rng.uniform(-1.0, 2.0, size=shape))
        grads[name] = ((signal + scale * noise) / K).astype(np.float32)
    return grads


def _opt_and_vars(transforms, seed):
    import keras

    names = sorted(SHAPES)
    seed_var = tf.Variable(seed, dtype=tf.int64, trainable=False)
    variables = {n: keras.Variable(np.zeros(SHAPES[n], np.float32), name=n) for n in names}
    opt = vrgd_tf.VRGDSGD(
        learning_rate=1.0,
        momentum=0.0,
        gamma=0.1,
        factor_transforms=[t(seed_var) for t in transforms],
    )
    opt.build([variables[n] for n in names])
    return names, variables, opt


def one_step(transforms, grads, seed=3):
    """Every replica's copy of each variable after one VRGD-SGD step (learning rate 1, no
    momentum) from 0 on 8 replicas with ``transforms``: ``w = -factor * S1``."""
    strategy = devices.cpu_strategy(K, argument="K")
    with strategy.scope():
        names, variables, opt = _opt_and_vars(transforms, seed)
    consts = {n: tf.constant(grads[n]) for n in names}

    @tf.function
    def step():
        def fn():
            rid = tf.distribute.get_replica_context().replica_id_in_sync_group
            opt.apply_gradients([(tf.gather(consts[n], rid), variables[n]) for n in names])

        strategy.run(fn)

    step()
    return {n: [np.array(x.numpy()) for x in variables[n].value.values] for n in names}


def one_grouped_step(transforms, grads, jit_compile, seed=3):
    """The same step on one device with the 8 gradients as micro-batch groups
    (``apply_grouped_gradients``, the registered layout), optionally compiled with XLA."""
    names, variables, opt = _opt_and_vars(transforms, seed)
    summed = {n: tf.constant(grads[n].sum(0)) for n in names}
    squares = {n: tf.constant((grads[n] ** 2).sum(0)) for n in names}

    @tf.function(jit_compile=jit_compile)
    def step():
        pairs = [(summed[n], variables[n]) for n in names]
        opt.apply_grouped_gradients(pairs, [squares[n] for n in names], K)

    step()
    return {n: [np.array(variables[n].numpy())] for n in names}


def scalar(seed_var):
    del seed_var
    return arms.scalar_vr


class ArmsThroughTheOptimizerTest(tf.test.TestCase):
    def _check(self, layout):
        grads = problem()
        vr = one_step([], grads)
        if layout == "replicas":
            sc = one_step([scalar], grads)
            sh = one_step([arms.shuffled_norm_matched], grads)
        else:
            sc = one_grouped_step([scalar], grads, jit_compile=layout == "groups_xla")
            sh = one_grouped_step([arms.shuffled_norm_matched], grads, layout == "groups_xla")
        for name in grads:
            for copies in (sc[name], sh[name]):
                for c in copies[1:]:
                    self.assertAllEqual(c, copies[0])  # the same on every replica
            s1 = grads[name].astype(np.float64).sum(0)
            u_vr = -vr[name][0].astype(np.float64)
            r = np.linalg.norm(u_vr) / np.linalg.norm(s1)
            self.assertLess(r, 1.0)
            # scalar-VR: exactly r * S1 (the base's direction, VR's update norm).
            self.assertAllClose(-sc[name][0], r * s1, rtol=2e-5, atol=1e-7)
            # norm-matched shuffle: VR's update norm; its factor is c * perm(VR's factor).
            u_sh = -sh[name][0].astype(np.float64)
            self.assertAllClose(np.linalg.norm(u_sh), np.linalg.norm(u_vr), rtol=2e-5)
            f_vr, f_sh = np.sort((u_vr / s1).ravel()), np.sort((u_sh / s1).ravel())
            c = f_sh / f_vr
            self.assertAllClose(c, np.full_like(c, c.mean()), rtol=1e-4)
            self.assertFalse(np.allclose(u_sh, u_vr))

    def test_eight_replicas(self):
        self._check("replicas")

    def test_one_device_eight_groups(self):
        self._check("groups")

    def test_one_device_eight_groups_xla(self):
        """The whole grouped step with either transform compiles with XLA (XLA's stateless
        RNG draws another permutation than the eager kernel: the properties hold)."""
        self._check("groups_xla")

    def test_shuffle_is_keyed_by_seed(self):
        grads = problem(1)
        a = one_step([arms.shuffled_norm_matched], grads, seed=3)
        b = one_step([arms.shuffled_norm_matched], grads, seed=3)
        c = one_step([arms.shuffled_norm_matched], grads, seed=4)
        self.assertAllEqual(a["kernel"][0], b["kernel"][0])
        self.assertFalse(np.allclose(a["kernel"][0], c["kernel"][0]))


class TransformsByHandTest(tf.test.TestCase):
    def _context(self, s1, step=0, index=0):
        s1 = tf.constant(s1, tf.float32)
        return FactorContext(index, None, s1, s1 * s1, K, tf.constant(step, tf.int64))

    def test_scalar_by_hand(self):
        """f = (1, 0.1), S1 = (3, 4): ||f S1|| = sqrt(9 + 0.16) = 3.02655, ||S1|| = 5,
        r = 0.605310; S1 = 0 gives r = 1."""
        out = arms.scalar_vr(tf.constant([1.0, 0.1]), self._context([3.0, 4.0]))
        self.assertAllClose(out, [0.605310, 0.605310], atol=1e-6)
        out = arms.scalar_vr(tf.constant([0.5, 0.1]), self._context([0.0, 0.0]))
        self.assertAllEqual(out, [1.0, 1.0])

    def test_shuffle_by_hand(self):
        f = tf.constant([1.0, 0.1, 0.5, 0.2])
        s1 = [3.0, 4.0, 0.0, 1.0]
        seed = tf.Variable(5, dtype=tf.int64)
        t = arms.shuffled_norm_matched(seed)
        out = t(f, self._context(s1, step=2, index=1)).numpy()
        order = arms.permutation(4, 5, 2, 1).numpy()
        self.assertAllEqual(np.sort(order), [0, 1, 2, 3])
        perm = f.numpy()[order]
        c = np.linalg.norm(f.numpy() * s1) / np.linalg.norm(perm * s1)
        self.assertAllClose(out, c * perm, rtol=1e-6)
        # Another step or variable draws another permutation (for this key, checked).
        self.assertNotAllEqual(order, arms.permutation(4, 5, 3, 1).numpy())
        # S1 = 0: no rescaling, the permuted factor itself.
        out0 = t(f, self._context([0.0] * 4, step=2, index=1)).numpy()
        self.assertAllClose(out0, perm)


if __name__ == "__main__":
    tf.test.main()
