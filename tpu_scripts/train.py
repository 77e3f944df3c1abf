r"""Trains and evaluates a Model Garden experiment with the VRGD optimizers.

Model Garden's standard driver (``official/nlp/train.py``, ``official/vision/train.py``)
with the VRGD optimizers and experiments registered (``import vrgd_tf.model_garden``), the
GSNR diagnostics in the train summaries (:class:`vrgd_tf.model_garden.trainer.VRGDTrainer`)
and one addition, ``--cpu_replicas``, so that the very command that runs on a Cloud TPU also
runs, data-parallel, on a machine's CPU.

Flags are Model Garden's (``official.common.flags.define_flags``): ``--experiment``,
``--mode``, ``--model_dir``, ``--config_file`` (repeatable), ``--params_override``,
``--tpu``, ``--gin_file``, ``--gin_params`` and friends, plus:

* ``--cpu_replicas=k`` (k >= 1): split the host CPU into k logical devices and train with a
  ``MirroredStrategy`` over them, whatever ``runtime.distribution_strategy`` says. VRGD needs
  k x ``trainer.vrgd_micro_batches`` >= 2 to see gradient noise. Use it where there is no
  accelerator.
* ``--enable_async_checkpointing``: Model Garden's asynchronous checkpoint saving.

Cloud TPU::

  python3 tpu_scripts/train.py --experiment=vrgd_resnet_imagenet --mode=train_and_eval \
    --model_dir=gs://bucket/resnet50_vrlars_32k --tpu=$TPU_NAME \
    --config_file=official_configs/resnet50_vrlars_32k.yaml \
    --params_override="task.train_data.input_path=gs://bucket/imagenet/train*,task.validation_data.input_path=gs://bucket/imagenet/valid*"

CPU, 2 replicas (see ``docs/model_garden.md``)::

  python3 tpu_scripts/train.py --experiment=vrgd_image_classification --mode=train_and_eval \
    --model_dir=/tmp/tiny_resnet --cpu_replicas=2 \
    --config_file=official_configs/cpu/tiny_resnet_digits_vrlars.yaml \
    --params_override="task.train_data.input_path=/tmp/vrgd_data/digits/train-*,task.validation_data.input_path=/tmp/vrgd_data/digits/validation-*"
"""

import logging as std_logging
import os
import pprint
import re
import sys

import tensorflow as tf
from absl import app, flags, logging
from official.common import flags as tfm_flags

FLAGS = flags.FLAGS

_PLACEHOLDER = re.compile(r"\$\{?[A-Z_][A-Z0-9_]*\}?|<[A-Z_]+>")


class OrbitPrintedFilter:
    """A ``logging`` filter that drops the INFO records of ``orbit.controller``: Orbit's
    controller both logs and prints each loop's line (``train | step: ...``, ``eval | ...``,
    checkpoints), so on a terminal each showed twice. The printed copy (stdout) stays; its
    warnings stay in the log (its one INFO line not printed, "Sync on async checkpoint
    saving.", goes too). Added to absl's handler in :func:`main`, for this process's
    own output only (Orbit itself is left as it is)."""

    def __init__(self):
        import orbit.controller  # pylint: disable=g-import-not-at-top

        self._path = os.path.splitext(os.path.realpath(orbit.controller.__file__))[0]

    def filter(self, record) -> bool:
        if record.levelno != std_logging.INFO:
            return True
        return os.path.splitext(os.path.realpath(record.pathname))[0] != self._path


def _define_flags():
    tfm_flags.define_flags()
    flags.DEFINE_integer(
        "cpu_replicas",
        0,
        "If >= 1, split the host CPU into this many logical devices (before TensorFlow "
        "initialises its devices) and train with a MirroredStrategy over them instead of "
        "runtime.distribution_strategy. For machines without an accelerator; VRGD needs "
        ">= 2 replicas to estimate the gradient noise.",
        lower_bound=0,
    )
    flags.DEFINE_bool(
        "enable_async_checkpointing",
        False,
        "Save checkpoints asynchronously (Model Garden's option).",
    )
    flags.DEFINE_bool(
        "fast_exit",
        True,
        "After a successful run (checkpoints and summaries are written and flushed by then), "
        "end the process with os._exit(0) instead of a normal interpreter shutdown. In "
        "TensorFlow 2.20 destroying a tf.data iterator joins its autotuning thread without "
        "waking it, which blocks the exit for up to half the input pipeline's lifetime "
        "(at most 60 s per pipeline). --nofast_exit restores the normal shutdown.",
    )
    flags.DEFINE_integer(
        "seed",
        None,
        "If set, seeds Python, NumPy and TensorFlow (tf_keras.utils.set_random_seed) before "
        "the model is built, so that runs with the same seed start from the same weights "
        "(pair it with task.train_data.seed for the data order).",
    )
    flags.mark_flags_as_required(["experiment", "mode", "model_dir"])


def configure_cpu_replicas(num_replicas: int):
    """``num_replicas`` logical CPU device names (:func:`vrgd_tf.devices.split_cpu`)."""
    from vrgd_tf import devices  # after __main__ made the checkout importable

    return devices.split_cpu(num_replicas, argument="--cpu_replicas")


def find_placeholders(params):
    """Returns ``[(dotted key, value)]`` of task paths still holding ``${VAR}`` placeholders.

    The YAML files in ``official_configs/`` write data paths as ``${DATA_DIR}/...``, which
    YAML cannot expand; the launchers pass the real paths with ``--params_override``.
    """
    found = []

    def walk(prefix, value):
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else k, v)
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                walk(f"{prefix}[{i}]", v)
        elif isinstance(value, str) and _PLACEHOLDER.search(value):
            found.append((prefix, value))

    walk("task", params.task.as_dict())
    return found


def build_strategy(params, cpu_replicas: int):
    """``MirroredStrategy`` over ``cpu_replicas`` logical CPUs, else Model Garden's choice."""
    from official.common import distribute_utils  # pylint: disable=g-import-not-at-top

    if cpu_replicas:
        devices = [f"/device:CPU:{i}" for i in range(cpu_replicas)]
        if params.runtime.distribution_strategy not in ("mirrored", "off", "one_device"):
            logging.warning(
                "--cpu_replicas=%d: using a MirroredStrategy over %s instead of "
                "runtime.distribution_strategy=%r.",
                cpu_replicas,
                devices,
                params.runtime.distribution_strategy,
            )
        return tf.distribute.MirroredStrategy(devices=devices)
    return distribute_utils.get_distribution_strategy(
        distribution_strategy=params.runtime.distribution_strategy,
        all_reduce_alg=params.runtime.all_reduce_alg,
        num_gpus=params.runtime.num_gpus,
        num_packs=params.runtime.num_packs,
        tpu_address=params.runtime.tpu,
        **params.runtime.model_parallelism(),
    )


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    logging.get_absl_handler().addFilter(OrbitPrintedFilter())
    if FLAGS.cpu_replicas:
        # Before anything creates a tensor: afterwards the CPU can no longer be split.
        devices = configure_cpu_replicas(FLAGS.cpu_replicas)
        logging.info("CPU split into %d logical devices: %s", len(devices), devices)

    # pylint: disable=g-import-not-at-top,unused-import
    import gin
    from official.common import registry_imports  # noqa: F401  (registers Model Garden's experiments)
    from official.core import task_factory, train_utils
    from official.modeling import performance

    import vrgd_tf.model_garden  # noqa: F401  (registers the VRGD optimizers and experiments)
    from vrgd_tf.model_garden import trainer as trainer_lib
    # pylint: enable=g-import-not-at-top,unused-import

    gin.parse_config_files_and_bindings(FLAGS.gin_file, FLAGS.gin_params)
    params = train_utils.parse_configuration(FLAGS, print_return=False)
    placeholders = find_placeholders(params)
    if placeholders:
        listing = "\n".join(f"  {k} = {v!r}" for k, v in placeholders)
        # A plain exit with the message (app.UsageError would print every flag's help too).
        raise SystemExit(
            "train.py: these paths still hold placeholders that YAML does not expand:\n"
            f"{listing}\nPass the real paths with --params_override, e.g. "
            f"--params_override={placeholders[0][0]}=/path/to/data (the launchers in "
            "tpu_scripts/ do this from $DATA_DIR)."
        )
    logging.info("Final experiment parameters:\n%s", pprint.pformat(params.as_dict()))

    model_dir = FLAGS.model_dir
    if "train" in FLAGS.mode:
        # Pure eval modes do not write the config, so a continuous evaluator cannot race the
        # trainer for the file (as in Model Garden's driver).
        train_utils.serialize_config(params, model_dir)
    if params.runtime.mixed_precision_dtype:
        performance.set_mixed_precision_policy(params.runtime.mixed_precision_dtype)

    strategy = build_strategy(params, FLAGS.cpu_replicas)
    logging.info(
        "Distribution strategy %s with %d replica(s) in sync.",
        type(strategy).__name__,
        strategy.num_replicas_in_sync,
    )
    opt_type = params.trainer.optimizer_config.optimizer.type or ""
    groups = getattr(params.trainer, "vrgd_micro_batches", 1)
    if opt_type.startswith("vrgd_") and strategy.num_replicas_in_sync * groups < 2:
        logging.warning(
            "%s with %d replica: VRGD has no gradient-noise estimate and steps exactly as "
            "its base optimizer. Use >= 2 replicas (on CPU: --cpu_replicas=2 or more) or "
            "micro-batch groups (trainer.vrgd_micro_batches=4).",
            opt_type,
            strategy.num_replicas_in_sync,
        )
    elif groups > 1:
        logging.info(
            "%d replica(s) x %d micro-batch groups: %d GSNR samples per step.",
            strategy.num_replicas_in_sync,
            groups,
            strategy.num_replicas_in_sync * groups,
        )

    if FLAGS.seed is not None:
        import tf_keras  # pylint: disable=g-import-not-at-top

        tf_keras.utils.set_random_seed(FLAGS.seed)
    with strategy.scope():
        task = task_factory.get_task(params.task, logging_dir=model_dir)
    trainer_lib.run_experiment(
        distribution_strategy=strategy,
        task=task,
        mode=FLAGS.mode,
        params=params,
        model_dir=model_dir,
        enable_async_checkpointing=FLAGS.enable_async_checkpointing,
    )
    train_utils.save_gin_config(FLAGS.mode, model_dir)
    logging.info("Done: %s of %s in %s.", FLAGS.mode, FLAGS.experiment, model_dir)
    if FLAGS.fast_exit:
        _exit_now()


def _exit_now():
    """Flushes the logs and standard streams, then ends the process with status 0."""
    for handler in std_logging.getLogger().handlers + logging.get_absl_logger().handlers:
        try:
            handler.flush()
        except Exception:  # pylint: disable=broad-except
            pass
    logging.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # pylint: disable=protected-access


if __name__ == "__main__":
    # Run from a checkout without `pip install`: make `vrgd_tf` importable.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    _define_flags()
    app.run(main)
