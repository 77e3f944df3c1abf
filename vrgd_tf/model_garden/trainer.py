"""Model Garden trainer that adds the VRGD GSNR diagnostics to the train summaries.

:class:`VRGDTrainer` is Model Garden's ``official.core.base_trainer.Trainer`` with one
addition: at the end of every train loop (``trainer.steps_per_loop`` steps) it adds the
headline diagnostics over variables (``vrgd/median/mean_gsnr``, ``vrgd/mean/mean_factor``,
``vrgd/mean/frac_at_gamma``, ``vrgd/mean/frac_at_one``) to the loop's logs, which Orbit prints
and writes to ``<model_dir>/train`` beside the loss and learning rate; and on the steps that
are multiples of ``trainer.summary_interval`` it writes the per-variable scalars and the
histograms over variables (:func:`vrgd_tf.summaries.write_gsnr_summaries`) to
``<model_dir>/train/vrgd``. For fresh values set the optimizer's ``statistics_interval`` to a
divisor of ``trainer.steps_per_loop`` (the ``official_configs`` YAMLs do). A run with a
non-VRGD optimizer is unchanged.

Use :func:`run_experiment` in place of ``official.core.train_lib.run_experiment``
(``tpu_scripts/train.py`` does).
"""

import os

import tensorflow as tf
from official.core import base_trainer
from official.core import train_lib
from official.core import train_utils

from vrgd_tf import summaries

__all__ = ["VRGDTrainer", "run_experiment"]


class VRGDTrainer(base_trainer.Trainer):
    """``base_trainer.Trainer`` whose train-loop logs carry the GSNR diagnostics.

    Args: those of ``base_trainer.Trainer``, plus
      summary_dir: str or None, where the per-variable summaries go (None: not written;
        the means still go to the loop logs).
    """

    def __init__(self, *args, summary_dir=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._vrgd_summary_dir = summary_dir
        self._vrgd_writer = None

    def train_loop_end(self):
        logs = super().train_loop_end()
        vrgd_logs = summaries.summary_logs(self.optimizer)
        logs.update({k: v for k, v in vrgd_logs.items()
                     if k.startswith(summaries.HEADLINE_PREFIXES)})
        interval = self.config.trainer.summary_interval or 0
        step = int(self.global_step.numpy())
        if vrgd_logs and self._vrgd_summary_dir and interval > 0 and step % interval == 0:
            if self._vrgd_writer is None:
                self._vrgd_writer = tf.summary.create_file_writer(self._vrgd_summary_dir)
            summaries.write_gsnr_summaries(self.optimizer, step, self._vrgd_writer)
            self._vrgd_writer.flush()
        return logs


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
                params, task, train=True,
                evaluate="eval" in mode or kwargs.get("run_post_eval", False),
                checkpoint_exporter=train_utils.maybe_create_best_ckpt_exporter(params,
                                                                               model_dir),
                trainer_cls=lambda *a, **kw: VRGDTrainer(
                    *a, summary_dir=os.path.join(model_dir, "train", "vrgd"), **kw))
    return train_lib.run_experiment(
        distribution_strategy=distribution_strategy, task=task, mode=mode, params=params,
        model_dir=model_dir, trainer=trainer, **kwargs)
