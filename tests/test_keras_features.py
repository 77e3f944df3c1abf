"""Keras 3 family: model.fit, serialization, checkpoints, argument checks, the hook guard."""

import functools
import os
import subprocess
import sys
import tempfile

import keras
import numpy as np
import tensorflow as tf
from absl.testing import parameterized

import vrgd_tf
from vrgd_tf import versions

import numpy_reference as ref
import util

ALL = {
    "VRGDSGD": (
        vrgd_tf.VRGDSGD,
        dict(
            learning_rate=0.05,
            momentum=0.8,
            nesterov=True,
            gamma=0.2,
            beta_3=0.5,
            statistics_interval=7,
        ),
    ),
    "VRGDAdam": (
        vrgd_tf.VRGDAdam,
        dict(
            learning_rate=0.01,
            beta_1=0.8,
            beta_2=0.99,
            epsilon=1e-6,
            amsgrad=True,
            gamma=0.3,
            beta_3=0.7,
        ),
    ),
    "VRGDLars": (
        vrgd_tf.VRGDLars,
        dict(
            learning_rate=0.5,
            momentum=0.8,
            weight_decay_rate=1e-3,
            eeta=0.01,
            nesterov=True,
            classic_momentum=False,
            exclude_from_weight_decay=["bias"],
            exclude_from_layer_adaptation=["bn"],
            gamma=0.05,
            beta_3=0.0,
        ),
    ),
    "VRGDLamb": (
        vrgd_tf.VRGDLamb,
        dict(
            learning_rate=0.01,
            beta_1=0.8,
            beta_2=0.99,
            epsilon=1e-5,
            weight_decay_rate=0.01,
            exclude_from_weight_decay=["bias", "LayerNorm"],
            exclude_from_layer_adaptation=None,
            gamma=0.1,
            beta_3=0.9,
        ),
    ),
}


def linear_problem(seed=0, n=16, d_in=4, d_out=3):
    rng = np.random.RandomState(seed)
    x = rng.randn(n, d_in).astype(np.float32)
    y = (x @ rng.randn(d_in, d_out) + 3.0 * rng.randn(n, d_out)).astype(np.float32)
    w0 = (0.1 * rng.randn(d_in, d_out)).astype(np.float32)
    return x, y, w0


def build_linear_model(w0):
    model = keras.Sequential(
        [keras.Input((w0.shape[0],)), keras.layers.Dense(w0.shape[1], name="dense")]
    )
    model.layers[0].kernel.assign(w0)
    return model


class FitTest(tf.test.TestCase, parameterized.TestCase):
    # Each replica count and each optimizer once: the (1/k) scaling is model.fit's, the
    # optimizer's rule is test_reference's (ReferenceTest.test_matches_numpy_reference, every
    # optimizer on 1, 2 and 4 replicas): the suite's time, issue 36.
    @parameterized.parameters((2, "VRGDLamb"), (4, "VRGDSGD"))
    def test_model_fit_matches_reference(self, k, name):
        """model.fit: the per-replica gradient is (1/k) d/dw mean-loss(shard d)."""
        x, y, w0 = linear_problem(seed=k)
        steps, n = 3, x.shape[0]
        cls, kwargs = {
            "VRGDSGD": (vrgd_tf.VRGDSGD, dict(learning_rate=0.1, momentum=0.9)),
            "VRGDLamb": (vrgd_tf.VRGDLamb, dict(learning_rate=0.05)),
        }[name]
        base = {"VRGDSGD": lambda: ref.SGD(0.1, 0.9), "VRGDLamb": lambda: ref.Lamb(0.05)}[name]
        strategy = util.strategy_for(k)
        with strategy.scope():
            model = build_linear_model(w0)
            opt = cls(gamma=0.1, **kwargs)
            model.compile(optimizer=opt, loss="mse")
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(n).repeat()
        model.fit(ds, epochs=steps, steps_per_epoch=1, verbose=0)

        vr = ref.VRGD(base(), 0.1, opt.beta_3)
        w = {"kernel": w0.astype(np.float64), "bias": np.zeros(w0.shape[1])}
        b = n // k
        for _ in range(steps):
            gk, gb = [], []
            for d in range(k):
                xd, yd = x[d * b : (d + 1) * b], y[d * b : (d + 1) * b]
                err = xd @ w["kernel"] + w["bias"] - yd
                scale = 2.0 / (b * yd.shape[1]) / k
                gk.append(scale * xd.T @ err)
                gb.append(scale * err.sum(0))
            w["kernel"] = vr.step("kernel", w["kernel"], np.stack(gk))
            w["bias"] = vr.step("bias", w["bias"], np.stack(gb))
        self.assertAllClose(model.layers[0].kernel.numpy(), w["kernel"], atol=1e-5)
        self.assertAllClose(model.layers[0].bias.numpy(), w["bias"], atol=1e-5)
        self.assertLess(vr.factors["kernel"].min(), 1.0)


@functools.lru_cache(maxsize=None)
def saved_lamb_model():
    """``(model, path)``: a VRGDLamb model fitted 2 steps on 2 replicas and saved as
    ``.keras``; made once for the two tests that load it (the suite's time, issue 36)."""
    x, y, w0 = linear_problem()
    with util.strategy_for(2).scope():
        model = build_linear_model(w0)
        model.compile(
            optimizer=vrgd_tf.VRGDLamb(
                learning_rate=0.01,
                weight_decay_rate=0.01,
                exclude_from_weight_decay=["bias"],
                statistics_interval=1,
            ),
            loss="mse",
        )
    model.fit(x, y, batch_size=16, epochs=2, verbose=0)
    path = os.path.join(tempfile.mkdtemp(), "m.keras")
    model.save(path)
    return model, path


class SerializationTest(tf.test.TestCase, parameterized.TestCase):
    @parameterized.parameters(sorted(ALL))
    def test_config_round_trip(self, name):
        cls, kwargs = ALL[name]
        opt = cls(**kwargs)
        config = opt.get_config()
        util.assert_config_has(self, config, kwargs)
        clone = cls.from_config(config)
        self.assertEqual(clone.get_config(), config)
        via_keras = keras.optimizers.deserialize(keras.optimizers.serialize(opt))
        self.assertIsInstance(via_keras, cls)
        self.assertEqual(via_keras.get_config(), config)

    def test_string_identifiers(self):
        """docs/guide.md: the registered name is an optimizer identifier (with its
        defaults); the bare class name and Model Garden's type name are not."""
        for cls in (vrgd_tf.VRGDLamb, vrgd_tf.VRGDLars, vrgd_tf.VRGDSGD, vrgd_tf.VRGDAdam):
            got = keras.optimizers.get(f"vrgd_tf>{cls.__name__}")
            self.assertIsInstance(got, cls)
            # Each instance has its own default name ("vrgd_lamb", "vrgd_lamb_1", ...).
            config, default = got.get_config(), cls().get_config()
            self.assertNotEqual(config.pop("name"), default.pop("name"))
            self.assertEqual(config, default)
        for name in ("VRGDLamb", "vrgd_lamb"):
            with self.assertRaisesRegex(ValueError, "Could not interpret optimizer identifier"):
                keras.optimizers.get(name)

    def test_save_and_load_model_without_custom_objects(self):
        model, path = saved_lamb_model()
        loaded = keras.models.load_model(path)
        self.assertIsInstance(loaded.optimizer, vrgd_tf.VRGDLamb)
        self.assertEqual(loaded.optimizer.get_config(), model.optimizer.get_config())
        saved, restored = model.optimizer.variables, loaded.optimizer.variables
        self.assertLen(restored, len(saved))
        self.assertEqual(
            [v.name for v in saved if v.name.startswith("vrgd_")],
            [v.name for v in restored if v.name.startswith("vrgd_")],
        )
        self.assertTrue(any("vrgd_deficit" in v.name for v in saved))
        for a, b in zip(saved, restored):
            np.testing.assert_array_equal(b.numpy(), a.numpy(), err_msg=a.name)
        self.assertGreater(np.abs(saved[-1].numpy()).max(), 0.0)

    def test_diagnostic_names_survive_save_and_load(self):
        """``sequential/d1/kernel`` becomes ``d1/kernel`` after load_model; the names
        of the diagnostics (and so the TensorBoard tags) do not change."""
        x, y, _ = linear_problem()
        strategy = util.strategy_for(2)
        with strategy.scope():
            model = keras.Sequential(
                [
                    keras.Input((4,)),
                    keras.layers.Dense(5, name="d1"),
                    keras.layers.Dense(3, name="d2"),
                ]
            )
            model.compile(
                optimizer=vrgd_tf.VRGDSGD(learning_rate=0.01, statistics_interval=1), loss="mse"
            )
        model.fit(x, y, batch_size=16, epochs=1, verbose=0)
        path = os.path.join(tempfile.mkdtemp(), "m.keras")
        model.save(path)
        with strategy.scope():
            loaded = keras.models.load_model(path)
        loaded.fit(x, y, batch_size=16, epochs=1, verbose=0)
        names = sorted(model.optimizer.vrgd_statistics())
        self.assertEqual(names, ["d1/bias", "d1/kernel", "d2/bias", "d2/kernel"])
        self.assertEqual(sorted(loaded.optimizer.vrgd_statistics()), names)

    def test_checkpoint_restores_and_training_continues_exactly(self):
        """2 replicas: a checkpoint after 2 of 4 steps, restored into a new run, continues
        with 2 steps as the uninterrupted run does (that run goes on past its checkpoint;
        the replica count is not what is tested: the suite's time, issue 36)."""
        from util import make_problem

        init, grads = make_problem(2, seed=9, steps=4)
        second = {n: g[2:] for n, g in grads.items()}
        strategy = util.strategy_for(2)
        make = lambda: vrgd_tf.VRGDLamb(  # noqa: E731
            learning_rate=0.01, weight_decay_rate=0.01, statistics_interval=1
        )
        run = util.custom_loop_steps(strategy, make, init, grads)
        for i, variables, opt in run:
            if i == 1:  # after 2 steps
                break
        ckpt_dir = tempfile.mkdtemp()
        path = tf.train.Checkpoint(optimizer=opt, **variables).save(os.path.join(ckpt_dir, "ckpt"))
        saved_deficit = opt.vrgd_aggregator.state.deficits[0].numpy()
        self.assertGreater(np.abs(saved_deficit).max(), 0.0)

        with strategy.scope():
            fresh = {n: keras.Variable(np.zeros_like(v), name=n) for n, v in init.items()}
            opt2 = make()
            opt2.build(list(fresh.values()))
        tf.train.Checkpoint(optimizer=opt2, **fresh).restore(path).assert_consumed()
        for a, b in zip(opt.variables, opt2.variables):
            for copy in util.replica_values(b):
                np.testing.assert_array_equal(copy, a.numpy(), err_msg=a.path)
        for _, straight, _ in run:  # the uninterrupted run's last 2 steps
            pass
        self.assertEqual(int(opt.iterations.numpy()), 4)
        resumed, _ = util.run_custom_loop(
            strategy, lambda: opt2, fresh_init(fresh), second, existing=fresh
        )
        for n in init:
            np.testing.assert_array_equal(resumed[n].numpy(), straight[n].numpy())


def fresh_init(variables):
    return {n: v.numpy() for n, v in variables.items()}


class ArgumentTest(tf.test.TestCase, parameterized.TestCase):
    @parameterized.parameters(
        (vrgd_tf.VRGDSGD, dict(gamma=0.0), ValueError, "gamma"),
        (vrgd_tf.VRGDSGD, dict(gamma=1.5), ValueError, r"\(0, 1\]"),
        (vrgd_tf.VRGDSGD, dict(gamma="0.1"), TypeError, "gamma"),
        (vrgd_tf.VRGDAdam, dict(beta_3=1.0), ValueError, r"beta_3.*\[0, 1\)"),
        (vrgd_tf.VRGDAdam, dict(beta_3=-0.1), ValueError, "beta_3"),
        (vrgd_tf.VRGDAdam, dict(learning_rate=-1.0), ValueError, "learning_rate"),
        (vrgd_tf.VRGDAdam, dict(epsilon=-1e-7), ValueError, "epsilon"),
        (vrgd_tf.VRGDSGD, dict(momentum=-0.5), ValueError, "momentum"),
        (
            vrgd_tf.VRGDLamb,
            dict(exclude_from_weight_decay="bias"),
            TypeError,
            "exclude_from_weight_decay.*bare string",
        ),
        (
            vrgd_tf.VRGDLars,
            dict(exclude_from_layer_adaptation=["ok", 3]),
            TypeError,
            "exclude_from_layer_adaptation",
        ),
        (
            vrgd_tf.VRGDLars,
            dict(exclude_from_weight_decay=["("]),
            ValueError,
            "exclude_from_weight_decay",
        ),
        (vrgd_tf.Lamb, dict(beta_2=1.0), ValueError, "beta_2"),
    )
    def test_bad_arguments_raise_before_any_state(self, cls, kwargs, error, pattern):
        with self.assertRaisesRegex(error, pattern):
            cls(**kwargs)

    def test_schedules_are_accepted(self):
        sched = keras.optimizers.schedules.CosineDecay(0.1, 100, warmup_target=0.2, warmup_steps=5)
        opt = vrgd_tf.VRGDLars(learning_rate=sched, statistics_interval=1)
        self.assertIsInstance(opt.get_config()["learning_rate"], dict)

    def test_any_keras_optimizer_class(self):
        """make_vrgd_optimizer on AdamW and Lion: VR on 4 replicas == the base class on one
        device fed the reference's variance-reduced gradient u = p_hat * S1."""
        from util import make_problem

        init, grads = make_problem(4, seed=11)
        u = {}
        for n, g in grads.items():
            mom = ref.FactorMomentum(0.9)
            u[n] = np.stack(
                [mom(f) * s1 for f, s1 in (ref.gsnr_factor(g[t], 0.1) for t in range(g.shape[0]))]
            )
            u[n] = u[n][:, None].astype(np.float32)
        for base in (keras.optimizers.AdamW, keras.optimizers.Lion):
            cls = vrgd_tf.make_vrgd_optimizer(base, default_beta_3=0.9)
            self.assertEqual(cls.__name__, "VRGD" + base.__name__)
            vr, _ = util.run_custom_loop(
                util.strategy_for(4), lambda: cls(learning_rate=0.01), init, grads
            )
            fed_u, _ = util.run_custom_loop(
                tf.distribute.get_strategy(), lambda: base(learning_rate=0.01), init, u
            )
            for n in init:
                self.assertAllClose(vr[n].numpy(), fed_u[n].numpy(), atol=1e-5, rtol=1e-5)
        with self.assertRaisesRegex(TypeError, "base_class"):
            vrgd_tf.make_vrgd_optimizer(dict)

    def test_made_class_loads_in_a_new_process_only_after_the_call(self):
        """README: a make_vrgd_optimizer class must exist (the call must have run) before
        keras.models.load_model in a new process; the built-in classes need only the import."""
        x, y, w0 = linear_problem()
        vrgd_adamw = vrgd_tf.make_vrgd_optimizer(keras.optimizers.AdamW, default_beta_3=0.9)
        with util.strategy_for(2).scope():
            model = build_linear_model(w0)
            model.compile(optimizer=vrgd_adamw(learning_rate=0.01), loss="mse")
        model.fit(x, y, batch_size=16, epochs=2, verbose=0)
        paths = {"adamw": os.path.join(tempfile.mkdtemp(), "adamw.keras")}
        model.save(paths["adamw"])
        paths["lamb"] = saved_lamb_model()[1]  # VRGDLamb, 2 steps (shared: fitted once)

        # One new process (each costs an import of TensorFlow): the made class fails to
        # load before the call and loads after it; VRGDLamb needs only the import.
        code = (
            "import sys, keras, numpy as np, vrgd_tf\n"
            "def load(path):\n"
            "    try:\n"
            "        m = keras.models.load_model(path)\n"
            "    except TypeError as e:\n"
            "        return 'FAILED ' + str(e).splitlines()[0]\n"
            "    d = [np.abs(v.numpy()).max() for v in m.optimizer.variables\n"
            "         if 'vrgd_deficit' in v.name]\n"
            "    return f'LOADED {type(m.optimizer).__name__} {int(m.optimizer.iterations)}'"
            " + f' {float(max(d))}'\n"
            "print(load(sys.argv[1]))\n"
            "print(load(sys.argv[2]))\n"
            "vrgd_tf.make_vrgd_optimizer(keras.optimizers.AdamW, default_beta_3=0.9)\n"
            "print(load(sys.argv[1]))\n"
        )
        repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=repo)
        out = subprocess.run(
            [sys.executable, "-c", code, paths["adamw"], paths["lamb"]],
            env=env,
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=300,
        )
        self.assertEqual(out.returncode, 0, out.stderr[-3000:])
        before, lamb, after = out.stdout.strip().splitlines()[-3:]
        self.assertRegex(before, "FAILED Could not locate class 'VRGDAdamW'")
        self.assertEqual(lamb.split()[:3], ["LOADED", "VRGDLamb", "2"])
        loaded = after.split()
        self.assertEqual(loaded[:3], ["LOADED", "VRGDAdamW", "2"])
        self.assertGreater(float(loaded[3]), 0.0)


class HookGuardTest(tf.test.TestCase):
    def test_bypassed_hook_fails_loudly(self):
        """If Keras stops calling _all_reduce_sum_gradients, apply must raise."""

        class Bypassed(vrgd_tf.VRGDSGD):
            def _backend_update_step(self, grads, trainable_variables, learning_rate):
                for g, v in zip(grads, trainable_variables):
                    v.assign_sub(learning_rate * g)

        init, grads = util.make_problem(2, seed=1, steps=1)
        # The message names the supported range.
        pattern = r"bypassed.*TensorFlow 2\.16-2\.21 with Keras 3\.10-3\.15"
        with self.assertRaisesRegex(RuntimeError, pattern):
            util.run_custom_loop(
                util.strategy_for(2), lambda: Bypassed(learning_rate=0.1), init, grads
            )


class VersionGuardTest(tf.test.TestCase, parameterized.TestCase):
    @parameterized.named_parameters(
        ("_keras_3_4_hook_in_merge_call", "2.18.1", "3.4.1", "Keras 3.4.1"),
        ("_keras_3_9_no_overwrite_hook", "2.19.1", "3.9.2", "Keras 3.9.2"),
        ("_keras_2", "2.15.1", "2.15.0", "TensorFlow 2.15.1 and Keras 2.15.0"),
        ("_tf_2_15", "2.15.1", "3.10.0", "TensorFlow 2.15.1"),
        ("_unparsable", "nightly", "3.15.1", "TensorFlow nightly"),
    )
    def test_unsupported_releases_raise_import_error_naming_the_range(self, tf_v, keras_v, found):
        with self.assertRaisesRegex(ImportError, "TensorFlow 2.16-2.21 with Keras 3.10-3.15") as cm:
            versions.check_keras3(tf_v, keras_v)
        self.assertIn(f"this environment has {found}.", str(cm.exception))

    @parameterized.parameters(
        ("2.16.2", "3.10.0"), ("2.20.0", "3.15.1"), ("2.21.0", "3.15.1"), ("2.22.0rc0", "3.16.0")
    )
    def test_supported_and_newer_releases_pass(self, tf_v, keras_v):
        versions.check_keras3(tf_v, keras_v)  # newer than tested: the hook guard watches
        versions.check_keras3(tf.__version__, keras.__version__)

    def test_setup_cfg_pins_the_same_range(self):
        """setup.cfg's install_requires and classifiers agree with vrgd_tf.versions."""
        path = os.path.join(os.path.dirname(__file__), "..", "setup.cfg")
        with open(path) as f:
            text = f.read()
        lo_tf, hi_tf = versions.MIN_TENSORFLOW, versions.TESTED_TENSORFLOW
        lo_k, hi_k = versions.MIN_KERAS, versions.TESTED_KERAS
        self.assertIn(
            f"tensorflow>={lo_tf[0]}.{lo_tf[1]},<{hi_tf[0]}.{hi_tf[1] + 1}", text.replace(" ", "")
        )
        self.assertIn(f"keras>={lo_k[0]}.{lo_k[1]},<{hi_k[0]}.{hi_k[1] + 1}", text.replace(" ", ""))
        self.assertIn("python_requires = >=3.9,<3.14", text)
        for minor in range(9, 14):
            self.assertIn(f"Programming Language :: Python :: 3.{minor}", text)


if __name__ == "__main__":
    tf.test.main()
