"""Model Garden config dataclasses for the VRGD optimizers.

Each VRGD config extends Model Garden's config of its base optimizer
(``official.modeling.optimization.configs.optimizer_config``) with the VRGD settings that are
config keys (:data:`vrgd_tf.settings.CONFIG_KEYS`: ``gamma``, ``beta_3``,
``statistics_interval``, ``squares_dtype``, ``state_dtype``, ``split_half``; spec ``docs/spec.md`` sections 2 and 3), with the
defaults of its optimizer class (``beta_3`` 0.9 for VR-Adam/VR-LAMB, 0 for VR-SGD/VR-LARS).
Fields, defaults, checks and docs all come from :class:`vrgd_tf.settings.VRGDSettings`.
For fresh diagnostics set ``statistics_interval`` to a divisor of
``trainer.steps_per_loop``, so that :class:`vrgd_tf.model_garden.trainer.VRGDTrainer`
summarises fresh values.

``OptimizerFactory`` passes every field of the selected config to the optimizer's
constructor as a keyword argument, so the field names are exactly the constructor
arguments of :mod:`vrgd_tf.tf_keras`'s classes.

The one-of :class:`VRGDOptimizerConfig` is Model Garden's ``OptimizerConfig`` plus the fields
``vrgd_sgd``, ``vrgd_adam``, ``vrgd_lars`` and ``vrgd_lamb``; every base type (``lamb``,
``lars``, ``sgd``, ...) stays available, so one experiment runs both the VRGD optimizer
and its baseline. :class:`VRGDOptimizationConfig`, :class:`VRGDTrainerConfig` and
:class:`VRGDExperimentConfig` carry it up to the experiment, so that YAML files and
``--params_override`` strings with ``vrgd_*`` keys validate (strictly: an unknown key is
a ``KeyError`` naming it) and a config rebuilt from ``as_dict()`` keeps those fields. Unlike
Model Garden's configs, these optimizer-side configs are strict when built from a dict too.
"""

import dataclasses

from official.core import config_definitions as cfg
from official.modeling.optimization.configs import optimization_config as mg_opt_cfg
from official.modeling.optimization.configs import optimizer_config as mg_cfg

from vrgd_tf import settings
from vrgd_tf import tf_keras as vrgd_tf_keras

__all__ = [
    "VRGDSGDConfig",
    "VRGDAdamConfig",
    "VRGDLarsConfig",
    "VRGDLambConfig",
    "VRGD_CONFIG_FIELDS",
    "VRGDOptimizerConfig",
    "VRGDOptimizationConfig",
    "VRGDTrainerConfig",
    "VRGDExperimentConfig",
    "check_optimization_config",
    "check_micro_batches",
]


class _StrictFromDict:
    """Makes ``Config(dict)`` strict: an unknown key is a ``KeyError`` naming it.

    Model Garden's ``Config(default_params)`` silently adds unknown keys (it overrides with
    ``is_strict=False``); for an optimizer config such a key would only fail later, as an
    unexpected keyword argument of the optimizer. Overrides (YAML, ``--params_override``,
    ``override(..., is_strict=True)``) are strict in Model Garden already.
    """

    def __post_init__(self, default_params, restrictions):
        super().__post_init__(None, restrictions)
        if default_params:
            self.override(default_params, is_strict=True)


def _vrgd_config(name: str, base: type, optimizer: type, summary: str) -> type:
    """The config dataclass ``name`` of the VRGD class ``optimizer``: ``base`` (its base
    optimizer's Model Garden config) plus the config-key settings with ``optimizer``'s
    defaults, and ``name`` defaulting to the class name."""
    defaults = optimizer.default_settings
    doc = (
        f"{summary}\n\n    Attributes (:class:`vrgd_tf.settings.VRGDSettings`):\n"
        + settings.args_doc(defaults, names=settings.CONFIG_KEYS)
    )
    fields = [("name", str, dataclasses.field(default=optimizer.__name__))]
    return dataclasses.make_dataclass(
        name,
        fields + settings.config_fields(defaults),
        bases=(_StrictFromDict, base),
        namespace={"__doc__": doc, "__module__": __name__},
    )


VRGDSGDConfig = _vrgd_config(
    "VRGDSGDConfig",
    mg_cfg.SGDConfig,
    vrgd_tf_keras.VRGDSGD,
    "VR-SGD / VR-Momentum (``vrgd_tf.tf_keras.VRGDSGD``): ``SGDConfig`` plus VRGD fields.",
)
VRGDAdamConfig = _vrgd_config(
    "VRGDAdamConfig",
    mg_cfg.AdamConfig,
    vrgd_tf_keras.VRGDAdam,
    "VR-Adam (``vrgd_tf.tf_keras.VRGDAdam``): ``AdamConfig`` plus VRGD fields.",
)
VRGDLarsConfig = _vrgd_config(
    "VRGDLarsConfig",
    mg_cfg.LARSConfig,
    vrgd_tf_keras.VRGDLars,
    "VR-LARS (``vrgd_tf.tf_keras.VRGDLars``): ``LARSConfig`` plus VRGD fields.",
)
VRGDLambConfig = _vrgd_config(
    "VRGDLambConfig",
    mg_cfg.LAMBConfig,
    vrgd_tf_keras.VRGDLamb,
    "VR-LAMB (``vrgd_tf.tf_keras.VRGDLamb``): ``LAMBConfig`` plus VRGD fields.",
)


#: One-of field name -> config class, for the four VRGD optimizers.
VRGD_CONFIG_FIELDS = {
    "vrgd_sgd": VRGDSGDConfig,
    "vrgd_adam": VRGDAdamConfig,
    "vrgd_lars": VRGDLarsConfig,
    "vrgd_lamb": VRGDLambConfig,
}


@dataclasses.dataclass
class VRGDOptimizerConfig(_StrictFromDict, mg_opt_cfg.OptimizerConfig):
    """Model Garden's optimizer one-of plus the VRGD optimizers.

    Attributes:
      type: one of the field names: ``vrgd_sgd``, ``vrgd_adam``, ``vrgd_lars``,
        ``vrgd_lamb`` or any of Model Garden's (``sgd``, ``adam``, ``lamb``, ``lars``, ...).
      vrgd_sgd: VR-SGD config.
      vrgd_adam: VR-Adam config.
      vrgd_lars: VR-LARS config.
      vrgd_lamb: VR-LAMB config.
    """

    vrgd_sgd: VRGDSGDConfig = dataclasses.field(default_factory=VRGDSGDConfig)
    vrgd_adam: VRGDAdamConfig = dataclasses.field(default_factory=VRGDAdamConfig)
    vrgd_lars: VRGDLarsConfig = dataclasses.field(default_factory=VRGDLarsConfig)
    vrgd_lamb: VRGDLambConfig = dataclasses.field(default_factory=VRGDLambConfig)


@dataclasses.dataclass
class VRGDOptimizationConfig(_StrictFromDict, mg_opt_cfg.OptimizationConfig):
    """Model Garden's ``OptimizationConfig`` whose optimizer one-of has the VRGD fields."""

    optimizer: VRGDOptimizerConfig = dataclasses.field(default_factory=VRGDOptimizerConfig)


@dataclasses.dataclass
class VRGDTrainerConfig(_StrictFromDict, cfg.TrainerConfig):
    """Model Garden's ``TrainerConfig`` carrying a :class:`VRGDOptimizationConfig`.

    Attributes:
      optimizer_config: the optimization config with the VRGD optimizer types.
      vrgd_micro_batches: int >= 1, the number ``m`` of micro-batch groups each replica
        splits its per-replica batch into (our extension of arXiv 2309.13681, Algorithm 1:
        the ``k`` GSNR samples of a step are ``replicas * m`` micro-batch gradients, taken at
        the same weights, with no extra collective). 1 (default): one sample per
        replica, Model Garden's own train step. ``m > 1`` needs a VRGD optimizer type
        (``vrgd_*``) and a per-replica batch (``task.train_data.global_batch_size /
        replicas``) that is a multiple of ``m``; :class:`~vrgd_tf.model_garden.trainer.VRGDTrainer`
        runs the task's train step once per group. With ``m >= 2`` one
        device (``--cpu_replicas=1``) runs real VRGD.
    """

    optimizer_config: VRGDOptimizationConfig = dataclasses.field(
        default_factory=VRGDOptimizationConfig
    )
    vrgd_micro_batches: int = 1


def check_micro_batches(value, path: str = "trainer.vrgd_micro_batches") -> int:
    """Returns ``value`` (the micro-batch group count) if it is an int >= 1.

    Args:
      value: the configured ``vrgd_micro_batches``.
      path: dotted config path used in the messages.

    Raises:
      TypeError: not an int (bools refused).
      ValueError: an int < 1.
    """
    fix = "(1 = no micro-batch groups; m >= 2 splits each per-replica batch into m)"
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{path} must be an int >= 1 {fix}; got {value!r}.")
    if value < 1:
        raise ValueError(
            f"{path} must be an int >= 1 {fix}; got {value}. Set e.g. --params_override={path}=1."
        )
    return value


def check_optimization_config(
    config: mg_opt_cfg.OptimizationConfig, path: str = "trainer.optimizer_config"
) -> None:
    """Checks the selected optimizer type and the VRGD arguments before anything is built.

    Model Garden only looks the type up when the optimizer is built, deep inside the
    trainer; this check fails at config time instead, naming the key.

    Args:
      config: an ``OptimizationConfig`` (normally a :class:`VRGDOptimizationConfig`).
      path: dotted path of ``config`` used in the messages.

    Raises:
      KeyError: ``optimizer.type`` is not one of the one-of's fields (names the
        known ones).
      ValueError, TypeError: a VRGD setting (``gamma``, ``beta_3``, ...) of the selected
        VRGD optimizer is out of range (names the key).
    """
    one_of = config.optimizer
    opt_type = one_of.type
    if opt_type is None:
        return
    fields = sorted(k for k in one_of.__dict__ if k not in one_of.RESERVED_ATTR and k != "type")
    if opt_type not in fields:
        raise KeyError(
            f"{path}.optimizer.type: unknown optimizer type {opt_type!r}; "
            f"known types: {', '.join(fields)}."
        )
    if opt_type in VRGD_CONFIG_FIELDS:
        settings.check_values(one_of.get(), prefix=f"{path}.optimizer.{opt_type}")


@dataclasses.dataclass
class VRGDExperimentConfig(cfg.ExperimentConfig):
    """Model Garden's ``ExperimentConfig`` with a :class:`VRGDTrainerConfig`.

    ``validate()`` (called by Model Garden's ``train_utils.parse_configuration``) also runs
    :func:`check_optimization_config` on ``trainer.optimizer_config`` and
    :func:`check_micro_batches` on ``trainer.vrgd_micro_batches``.
    """

    trainer: VRGDTrainerConfig = dataclasses.field(default_factory=VRGDTrainerConfig)

    def validate(self):
        # First, so that an unknown optimizer type gets the message that lists the known
        # ones rather than Model Garden's one-of error.
        check_optimization_config(self.trainer.optimizer_config)
        check_micro_batches(self.trainer.vrgd_micro_batches)
        super().validate()
