"""Model Garden with micro-batch groups: ``trainer.vrgd_micro_batches`` (k = replicas x m).

* the config field: default 1, YAML and ``--params_override``, round trip, refusals naming
  the key;
* ``VRGDTrainer`` in this process on a linear task: 1 replica x 4 groups, 2 x 2 and 4 x 1
  train the same weights, equal to the NumPy reference with k = 4; its refusals;
* end to end, ``tpu_scripts/train.py --cpu_replicas=1`` with
  ``official_configs/cpu/tiny_resnet_digits_vrlars_1cpu_4groups.yaml``, is the ResNet run
  of ``test_model_garden_e2e.py``.
"""

import os

import numpy as np
import tensorflow as tf
import tf_keras
from official.core import base_task, exp_factory
from official.core import config_definitions as cfg
from official.modeling import hyperparams

import vrgd_tf.model_garden  # noqa: F401  (registers the experiments)
from vrgd_tf import tf_keras as vtk
from vrgd_tf.model_garden import configs as vconfigs
from vrgd_tf.model_garden.trainer import VRGDTrainer

import numpy_reference as ref
import util

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CPU_CONFIGS = os.path.join(REPO, "official_configs", "cpu")
YAML = os.path.join(CPU_CONFIGS, "tiny_resnet_digits_vrlars_1cpu_4groups.yaml")

K, N, STEPS = 4, 16, 3


class ConfigTest(tf.test.TestCase):
    def test_default_yaml_override_and_round_trip(self):
        config = exp_factory.get_exp_config("vrgd_image_classification")
        self.assertEqual(config.trainer.vrgd_micro_batches, 1)
        hyperparams.override_params_dict(config, YAML, is_strict=True)
        self.assertEqual(config.trainer.vrgd_micro_batches, 4)
        hyperparams.override_params_dict(config, "trainer.vrgd_micro_batches=8", is_strict=True)
        self.assertEqual(config.trainer.vrgd_micro_batches, 8)
        config.validate()
        as_dict = config.as_dict()
        rebuilt = type(config)(as_dict)
        self.assertEqual(rebuilt.as_dict(), as_dict)
        self.assertEqual(rebuilt.trainer.vrgd_micro_batches, 8)
        path = os.path.join(self.get_temp_dir(), "params.yaml")
        hyperparams.save_params_dict_to_yaml(config, path)
        reparsed = exp_factory.get_exp_config("vrgd_image_classification")
        hyperparams.override_params_dict(reparsed, path, is_strict=True)
        self.assertEqual(reparsed.as_dict(), as_dict)

    def test_values_below_one_are_refused_naming_the_key(self):
        config = exp_factory.get_exp_config("vrgd_image_classification")
        hyperparams.override_params_dict(config, "trainer.vrgd_micro_batches=0", is_strict=True)
        with self.assertRaisesRegex(
            ValueError,
            r"trainer\.vrgd_micro_batches must be an int "
            r">= 1 .*got 0",
        ):
            config.validate()
        with self.assertRaisesRegex(KeyError, "vrgd_micro_batch"):
            hyperparams.override_params_dict(config, "trainer.vrgd_micro_batch=2", is_strict=True)
        with self.assertRaisesRegex(TypeError, r"trainer\.vrgd_micro_batches"):
            vconfigs.check_micro_batches(2.0)


class LinearTask(base_task.Task):
    """``y = x W + b`` with the mean squared error, through base Task.train_step."""

    def __init__(self, w0, params=None):
        super().__init__(params)
        self._w0 = w0

    def build_model(self):
        model = tf_keras.Sequential(
            [tf_keras.layers.Dense(self._w0.shape[1], input_shape=(self._w0.shape[0],))]
        )
        model.layers[0].kernel.assign(self._w0)
        return model

    def build_inputs(self, params, input_context=None):  # pragma: no cover - not used
        raise NotImplementedError

    def build_losses(self, labels, model_outputs, aux_losses=None):
        return tf.reduce_mean(tf.square(model_outputs - labels))


class NoApplyTask(LinearTask):
    def train_step(self, inputs, model, optimizer, metrics=None):
        return {self.loss: tf.constant(0.0)}


def linear_problem(seed=21):
    rng = np.random.RandomState(seed)
    x = rng.randn(N, 4).astype(np.float32)
    y = (x @ rng.randn(4, 3) + 3.0 * rng.randn(N, 3)).astype(np.float32)
    w0 = (0.1 * rng.randn(4, 3)).astype(np.float32)
    return x, y, w0


def experiment(groups, global_batch=N):
    return vconfigs.VRGDExperimentConfig(
        task=cfg.TaskConfig(train_data=cfg.DataConfig(global_batch_size=global_batch)),
        trainer=vconfigs.VRGDTrainerConfig(
            vrgd_micro_batches=groups, optimizer_config={"optimizer": {"type": "vrgd_lamb"}}
        ),
    )


def make_trainer(replicas, groups, make_optimizer, *, task_cls=LinearTask, global_batch=N, seed=21):
    x, y, w0 = linear_problem(seed)
    strategy = util.strategy_for(replicas)
    with strategy.scope():
        task = task_cls(w0)
        model = task.build_model()
        dataset = strategy.experimental_distribute_dataset(
            tf.data.Dataset.from_tensor_slices((x, y))
            .batch(global_batch, drop_remainder=True)
            .repeat()
        )
        trainer = VRGDTrainer(
            experiment(groups, global_batch),
            task,
            model=model,
            optimizer=make_optimizer(),
            train=True,
            evaluate=False,
            train_dataset=dataset,
        )
    return trainer, (x, y, w0)


class TrainerTest(tf.test.TestCase):
    def test_replicas_times_groups_matches_the_reference(self):
        results = {}
        for replicas in (1, 2, 4):
            trainer, (x, y, w0) = make_trainer(
                replicas,
                K // replicas,
                lambda: vtk.VRGDLamb(
                    0.05,
                    weight_decay_rate=0.01,
                    exclude_from_weight_decay=["bias"],
                    statistics_interval=1,
                ),
            )
            self.assertEqual(trainer.vrgd_micro_batches, K // replicas)
            logs = trainer.train(tf.constant(STEPS))
            util.release_iterator(trainer)
            self.assertEqual(int(trainer.global_step.numpy()), STEPS)
            self.assertGreater(logs["vrgd/median/mean_gsnr"], 0.0)
            results[replicas] = (
                [v.numpy() for v in trainer.model.trainable_variables],
                float(logs["training_loss"]),
            )

        vr = ref.VRGD(
            ref.Lamb(0.05, weight_decay_rate=0.01, exclude_from_weight_decay=["bias"]), 0.1, 0.9
        )
        w = {"kernel": w0.astype(np.float64), "bias": np.zeros(w0.shape[1])}
        b = N // K
        losses = []
        for _ in range(STEPS):
            gk, gb = [], []
            err_all = x @ w["kernel"] + w["bias"] - y
            losses.append(np.mean(err_all**2))
            for q in range(K):
                err = err_all[q * b : (q + 1) * b]
                scale = 2.0 / (b * y.shape[1]) / K
                gk.append(scale * x[q * b : (q + 1) * b].T @ err)
                gb.append(scale * err.sum(0))
            w["kernel"] = vr.step("kernel", w["kernel"], np.stack(gk))
            w["bias"] = vr.step("bias", w["bias"], np.stack(gb))
        self.assertLess(vr.factors["kernel"].min(), 1.0)
        for replicas, (got, loss) in results.items():
            for a, b_ in zip(got, results[4][0]):
                self.assertAllClose(
                    a, b_, rtol=1e-6, atol=1e-6, msg=f"{replicas} x {K // replicas} vs 4 x 1"
                )
            self.assertAllClose(got[0], w["kernel"], rtol=1e-5, atol=1e-5)
            self.assertAllClose(got[1], w["bias"], rtol=1e-5, atol=1e-5)
            # The loop's mean training loss over its steps, the groups' mean per step.
            self.assertAllClose(loss, np.mean(losses), rtol=1e-5)

    def test_refusals(self):
        with self.assertRaisesRegex(
            TypeError,
            r"trainer\.vrgd_micro_batches=4 needs a VRGD "
            r"optimizer.*got LAMB.*vrgd_micro_batches=1",
        ):
            from official.modeling.optimization import lamb

            make_trainer(1, 4, lambda: lamb.LAMB(0.01))
        with self.assertRaisesRegex(TypeError, "mixed_precision_dtype='float16'"):
            make_trainer(
                1,
                4,
                lambda: tf_keras.mixed_precision.LossScaleOptimizer(
                    vtk.VRGDSGD(0.1, statistics_interval=1)
                ),
            )
        with self.assertRaisesRegex(TypeError, r"optimizer_config\.ema"):
            from official.modeling import optimization

            make_trainer(
                1,
                4,
                lambda: optimization.ExponentialMovingAverage(
                    vtk.VRGDSGD(0.1, statistics_interval=1)
                ),
            )
        with self.assertRaisesRegex(
            ValueError,
            r"per-replica batch of 6 examples.*"
            r"global_batch_size=12 over 2 replicas.*"
            r"multiple of replicas x vrgd_micro_batches "
            r"= 8",
        ):
            make_trainer(2, 4, lambda: vtk.VRGDSGD(0.1, statistics_interval=1), global_batch=12)
        trainer, _ = make_trainer(
            1, 2, lambda: vtk.VRGDSGD(0.1, statistics_interval=1), task_cls=NoApplyTask
        )
        with self.assertRaisesRegex(
            RuntimeError,
            r"NoApplyTask.train_step .*called it 0 "
            r"times",
        ):
            trainer.train(tf.constant(1))
        util.release_iterator(trainer)

    def test_release_iterator_frees_it_at_once(self):
        """util.release_iterator frees the trainer's iterator without a garbage collection
        (without it the trainer's reference cycles keep it until one, see its docstring)."""
        import weakref

        trainer, _ = make_trainer(2, 2, lambda: vtk.VRGDSGD(0.1, statistics_interval=1))
        trainer.train(tf.constant(1))
        iterator = weakref.ref(trainer._train_iter)  # read only, to watch it
        self.assertIsNotNone(iterator())
        util.release_iterator(trainer)
        self.assertIsNone(iterator())
        trainer.train(tf.constant(1))  # a new iterator over the same dataset
        self.assertEqual(int(trainer.global_step.numpy()), 2)
        util.release_iterator(trainer)


if __name__ == "__main__":
    tf.test.main()
