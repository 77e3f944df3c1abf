"""TF Model Garden integration of the VRGD optimizers (tf_keras family).

``import vrgd_tf.model_garden`` is all it takes:

* registers the optimizer types ``vrgd_sgd``, ``vrgd_adam``, ``vrgd_lars`` and
  ``vrgd_lamb`` with ``official.modeling.optimization.optimizer_factory``
  (:mod:`vrgd_tf.model_garden.registry`);
* provides their config dataclasses and the one-of / optimization / trainer / experiment
  configs that carry them (:mod:`vrgd_tf.model_garden.configs`);
* registers the experiments ``vrgd_bert_pretraining``, ``vrgd_resnet_imagenet`` and
  ``vrgd_image_classification`` with ``official.core.exp_factory``
  (:mod:`vrgd_tf.model_garden.experiments`).

The training entry point is ``tpu_scripts/train.py``; the ready-to-launch YAML files are in
``official_configs/``; see ``docs/model_garden.md``.
"""

from vrgd_tf.model_garden import configs, experiments, registry
from vrgd_tf.model_garden.configs import (
    VRGDAdamConfig,
    VRGDExperimentConfig,
    VRGDLambConfig,
    VRGDLarsConfig,
    VRGDOptimizationConfig,
    VRGDOptimizerConfig,
    VRGDSGDConfig,
    VRGDTrainerConfig,
)
from vrgd_tf.model_garden.registry import OPTIMIZER_TYPES

__all__ = [
    "OPTIMIZER_TYPES",
    "VRGDSGDConfig",
    "VRGDAdamConfig",
    "VRGDLarsConfig",
    "VRGDLambConfig",
    "VRGDOptimizerConfig",
    "VRGDOptimizationConfig",
    "VRGDTrainerConfig",
    "VRGDExperimentConfig",
    "configs",
    "experiments",
    "registry",
]
