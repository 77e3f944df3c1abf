"""Model Garden trainer that adds the VRGD GSNR diagnostics to the train summaries.

:class:`VRGDTrainer` is Model Garden's ``official.core.base_trainer.Trainer`` with one
addition: at the end of every train loop (``trainer.steps_per_loop`` steps) it adds the
headline diagnostics over variables (``vrgd/median/mean_gsnr``, ``vrgd/mean/mean_factor``,
``vrgd/mean/frac_at_gamma``, ``vrgd/mean/frac_at_one``, ``vrgd/mean/norm_ratio``) to the
loop's logs, which Orbit prints
and writes to ``<model_dir>/train`` beside the loss and learning rate; and on the steps that
are multiples of ``trainer.summary_interval`` it writes the per-variable scalars and the
histograms over variables (:func:`vrgd_tf.summaries.write_gsnr_summaries`) to
``<model_dir>/train/vrgd``. For fresh values set the optimizer's ``statistics_interval`` to a
divisor of ``trainer.steps_per_loop`` (the ``official_configs`` YAMLs do). A run with a
non-VRGD optimizer is unchanged.

Micro-batch groups: with ``trainer.vrgd_micro_batches = m > 1``
(:class:`vrgd_tf.model_garden.configs.VRGDTrainerConfig`) each replica splits its batch into
``m`` groups and the VRGD optimizer gets ``k = replicas * m`` GSNR samples per step (see
:meth:`VRGDTrainer.train_step`).

Use :func:`run_experiment` in place of ``official.core.train_lib.run_experiment``
(``tpu_scripts/train.py`` does).
"""

import os

import tensorflow as tf
import tf_keras
from official.core import base_trainer, train_lib, train_utils
from official.modeling import optimization

from vrgd_tf import common, micro_batches, summaries
from vrgd_tf.model_garden import configs

__all__ = ["VRGDTrainer", "run_experiment"]


class VRGDTrainer(base_trainer.Trainer):
    """``base_trainer.Trainer`` whose train-loop logs carry the GSNR diagnostics, and that
    runs micro-batch groups when ``trainer.vrgd_micro_batches > 1``.

    Args: those of ``base_trainer.Trainer``, plus
      summary_dir: str or None, where the per-variable summaries go (None: not written;
        the means still go to the loop logs).

    Raises:
      TypeError, ValueError: ``trainer.vrgd_micro_batches`` is not an int >= 1; or it is
        > 1 and the optimizer is not a tf_keras VRGD optimizer (e.g. a base type, or one
        wrapped by ``mixed_float16``'s ``LossScaleOptimizer`` or by the EMA option), or
        the per-replica batch (``task.train_data.global_batch_size / replicas``) is not a
        multiple of it. The messages name the config keys.
    """

    def __init__(self, *args, summary_dir=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._vrgd_summary_dir = summary_dir
        self._vrgd_writer = None
        self._vrgd_micro_batches = configs.check_micro_batches(
            getattr(self.config.trainer, "vrgd_micro_batches", 1)
        )
        train = kwargs.get("train", args[4] if len(args) > 4 else True)
        if self._vrgd_micro_batches > 1 and train:
            self._vrgd_check_micro_batches()

    @property
    def vrgd_micro_batches(self) -> int:
        """``m``: the micro-batch groups per replica (1: Model Garden's own train step)."""
        return self._vrgd_micro_batches

    def _vrgd_check_micro_batches(self) -> None:
        m = self._vrgd_micro_batches
        key = f"trainer.vrgd_micro_batches={m}"
        optimizer = self.optimizer
        if not isinstance(optimizer, common.VRGDCommon):
            if isinstance(optimizer, tf_keras.mixed_precision.LossScaleOptimizer):
                why = (
                    "runtime.mixed_precision_dtype='float16' wraps the optimizer in a "
                    "LossScaleOptimizer, which micro-batch groups do not support; use "
                    "'bfloat16' or 'float32' (no loss scaling)"
                )
            elif isinstance(optimizer, optimization.ExponentialMovingAverage):
                why = (
                    "trainer.optimizer_config.ema wraps the optimizer in Model Garden's "
                    "ExponentialMovingAverage, which micro-batch groups do not support; "
                    "remove the `ema` block"
                )
            else:
                opt_type = getattr(
                    getattr(
                        getattr(self.config.trainer, "optimizer_config", None), "optimizer", None
                    ),
                    "type",
                    None,
                )
                why = (
                    f"trainer.optimizer_config.optimizer.type={opt_type!r} is not a VRGD "
                    "type: use vrgd_sgd, vrgd_adam, vrgd_lars or vrgd_lamb, or set "
                    "trainer.vrgd_micro_batches=1 for a baseline run"
                )
            raise TypeError(
                f"{key} needs a VRGD optimizer (the groups are its GSNR "
                f"samples); got {type(optimizer).__name__}: {why}."
            )
        data = getattr(self.config.task, "train_data", None)
        global_batch = getattr(data, "global_batch_size", None)
        replicas = self.strategy.num_replicas_in_sync
        if isinstance(global_batch, int) and global_batch > 0:
            per_replica, rest = divmod(global_batch, replicas)
            if rest == 0 and per_replica % m:
                raise ValueError(
                    f"{key}: the per-replica batch of {per_replica} examples "
                    f"(task.train_data.global_batch_size={global_batch} over {replicas} "
                    f"replicas) does not split into {m} equal micro-batches. Make "
                    f"task.train_data.global_batch_size a multiple of replicas x "
                    f"vrgd_micro_batches = {replicas * m} (e.g. "
                    f"{replicas * m * max(1, round(per_replica / m))}), or change "
                    "trainer.vrgd_micro_batches."
                )

    def train_step(self, iterator):
        """Model Garden's train step; with ``m = trainer.vrgd_micro_batches > 1``, in groups.

        With ``m > 1`` each replica splits its batch (every tensor of the task's input
        nest, along dimension 0) into ``m`` equal contiguous groups and, one group after
        the other at the same weights, runs the task's own ``train_step`` (its forward
        pass, ``build_losses``, its 1/replicas loss scaling and its metric updates), whose
        ``optimizer.apply_gradients`` call is caught instead of applied. The groups'
        gradients ``g_j``, divided by ``m`` (so that their sum is the per-replica batch's
        gradient, as for ``m`` times more replicas), are summed, their squares
        ``sum_j (g_j / m)**2`` too (sparse gradients: the squares of their dense form), and
        the VRGD optimizer's ``apply_grouped_gradients`` applies them with one step's collectives:
        ``k = replicas * m`` GSNR samples (arXiv 2309.13681, Algorithm 1; the groups are our
        extension). The step's ``training_loss`` is the mean of the groups' losses. The
        count of contributing samples is taken from the data (``docs/spec.md`` section 1): a
        group counts when it has rows, so the empty replicas of a short last batch do not,
        and one that sends a regularizer's gradient makes the step the base step.

        What the groups change: batch normalization normalizes each group by its own
        statistics and updates its moving averages ``m`` times per step; anything a task's
        ``train_step`` does to the gradients before ``apply_gradients`` (clipping) is done
        per group; metrics are updated per group (the same for metrics that accumulate over
        examples, which Model Garden's are).

        Raises:
          ValueError: (trace time) the per-replica batch is not a multiple of ``m``.
          RuntimeError: (trace time) the task's ``train_step`` did not call
            ``optimizer.apply_gradients`` exactly once per group.
        """
        if self._vrgd_micro_batches == 1:
            return super().train_step(iterator)

        grouped_step = self._vrgd_grouped_task_step
        if self.config.runtime.enable_xla and (self.config.runtime.num_gpus > 0):
            grouped_step = tf.function(grouped_step, jit_compile=True)

        def step_fn(inputs):
            logs = grouped_step(inputs)
            self._train_loss.update_state(logs[self.task.loss])
            self.global_step.assign_add(1)

        inputs = self.next_train_inputs(iterator)
        self.strategy.run(step_fn, args=(inputs,), options=self._runtime_options)

    def _vrgd_grouped_task_step(self, inputs):
        """One replica's step in ``m`` groups (see :meth:`train_step`); returns the logs."""
        m = self._vrgd_micro_batches
        task_name = type(self.task).__name__
        recorder = _GradientRecorder(self.optimizer)

        def group_step(group):
            logs = self.task.train_step(
                group, model=self.model, optimizer=recorder, metrics=self.train_metrics
            )
            return recorder.take(task_name), logs

        groups = micro_batches.split_batch(inputs, m)
        # The count from the data (spec section 1): a group counts when it has rows (the
        # tasks' input nests carry no sample-weight convention).
        contributes = [micro_batches.group_contributes(group) for group in groups]
        result = micro_batches.run_groups(
            groups, group_step, scale=1.0 / m, contributes=contributes
        )
        self.optimizer.apply_grouped_gradients(
            result.grads_and_vars,
            result.sq_sums,
            num_groups=m,
            num_contributing=result.num_contributing,
        )
        logs = dict(result.outputs[-1])
        losses = [tf.cast(group_logs[self.task.loss], tf.float32) for group_logs in result.outputs]
        logs[self.task.loss] = tf.add_n(losses) / float(m)
        return logs

    def train_loop_end(self):
        logs = super().train_loop_end()
        vrgd_logs = summaries.summary_logs(self.optimizer)
        logs.update(
            {k: v for k, v in vrgd_logs.items() if k.startswith(summaries.HEADLINE_PREFIXES)}
        )
        interval = self.config.trainer.summary_interval or 0
        step = int(self.global_step.numpy())
        if vrgd_logs and self._vrgd_summary_dir and interval > 0 and step % interval == 0:
            if self._vrgd_writer is None:
                self._vrgd_writer = tf.summary.create_file_writer(self._vrgd_summary_dir)
            summaries.write_gsnr_summaries(self.optimizer, step, self._vrgd_writer)
            self._vrgd_writer.flush()
        return logs


class _GradientRecorder:
    """Stands in for the optimizer in a task's ``train_step``: catches ``apply_gradients``.

    Every other attribute is the real optimizer's, so a task can read its learning rate
    or iterations.
    """

    def __init__(self, optimizer):
        self._vrgd_optimizer = optimizer
        self._vrgd_calls = []

    def apply_gradients(self, grads_and_vars, *args, **kwargs):  # pylint: disable=unused-argument
        self._vrgd_calls.append(list(grads_and_vars))
        return None

    def take(self, task_name):
        """The one call's ``(gradient, variable)`` pairs since the last ``take``."""
        calls, self._vrgd_calls = self._vrgd_calls, []
        if len(calls) != 1:
            raise RuntimeError(
                f"trainer.vrgd_micro_batches > 1 runs {task_name}.train_step once per group "
                "and needs it to call `optimizer.apply_gradients(grads_and_vars)` exactly "
                f"once; it called it {len(calls)} times. Use trainer.vrgd_micro_batches=1 "
                "with this task."
            )
        return calls[0]

    def __getattr__(self, name):
        return getattr(self._vrgd_optimizer, name)


def run_experiment(*, distribution_strategy, task, mode, params, model_dir, **kwargs):
    """``official.core.train_lib.run_experiment`` with a :class:`VRGDTrainer`.

    Args:
      distribution_strategy, task, mode, params, model_dir: as for Model Garden's
        ``run_experiment``; ``kwargs`` are passed on (not ``trainer``).

    Returns:
      What Model Garden's ``run_experiment`` returns: ``(model, eval_logs)``.
    """
    trainer = None
    if "train" in mode:
        with distribution_strategy.scope():
            trainer = train_utils.create_trainer(
                params,
                task,
                train=True,
                evaluate="eval" in mode or kwargs.get("run_post_eval", False),
                checkpoint_exporter=train_utils.maybe_create_best_ckpt_exporter(params, model_dir),
                trainer_cls=lambda *a, **kw: VRGDTrainer(
                    *a, summary_dir=os.path.join(model_dir, "train", "vrgd"), **kw
                ),
            )
    return train_lib.run_experiment(
        distribution_strategy=distribution_strategy,
        task=task,
        mode=mode,
        params=params,
        model_dir=model_dir,
        trainer=trainer,
        **kwargs,
    )
