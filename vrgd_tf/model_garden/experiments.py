"""VRGD experiments registered with Model Garden's ``exp_factory``.

Each experiment is Model Garden's own experiment config (same task, data loader, model and
runtime defaults, taken from its registered factory) with a :class:`~vrgd_tf.model_garden.configs.VRGDTrainerConfig`
whose optimization config has the VRGD fields, and a large-batch optimizer and schedule
instead of Model Garden's defaults (AdamW for ``bert/pretraining``, SGD at batch 4096 for
``resnet_imagenet``):

``vrgd_bert_pretraining``
    From ``bert/pretraining`` (``official.nlp.tasks.masked_lm``). Defaults: BERT-large,
    phase 1 of NVIDIA's 64k/32k LAMB recipe (sequence length 128, global batch 65536,
    7038 steps, peak learning rate 6e-3, 28.43% warm-up) with VR-LAMB. See
    ``official_configs/bert_large_vrlamb_*.yaml`` for every phase and batch size.
``vrgd_resnet_imagenet``
    From ``resnet_imagenet`` (``official.vision.configs.image_classification``). Defaults:
    ResNet-50, global batch 32768, VR-LARS with the MLPerf LARS recipe (peak learning rate
    31.2, 25 warm-up epochs, polynomial decay of power 2, label smoothing 0.1, LARS weight
    decay 2e-4 without batch norm and biases), 90 epochs.
``vrgd_image_classification``
    From ``image_classification`` (Model Garden's generic, empty classification config),
    with the VRGD optimization config; everything else comes from a YAML file (used by the
    small CPU runs on scikit-learn's digits).

In every experiment the optimizer one-of carries both the VRGD optimizer and its base one
with the same hyper-parameters (``vrgd_lamb`` and ``lamb``, ``vrgd_lars`` and ``lars``), so
the baseline is ``--params_override=trainer.optimizer_config.optimizer.type=lamb`` (or
``lars``) away.
"""

import dataclasses
import math

from official.core import config_definitions as cfg
from official.core import exp_factory
from official.modeling.optimization.configs import learning_rate_config as lr_cfg
from official.modeling.optimization.configs import optimization_config as mg_opt_cfg
from official.modeling.optimization.configs import optimizer_config as mg_cfg
from official.nlp.configs import bert as bert_cfg

# Registers Model Garden's `bert/pretraining`, which ours is built from.
from official.nlp.configs import pretraining_experiments  # noqa: F401  (registration)
from official.nlp.data import pretrain_dataloader
from official.nlp.tasks import masked_lm  # Also registers the masked-LM task.

# Registers `resnet_imagenet` and `image_classification`, and their task.
from official.vision.configs import image_classification as ic_cfg
from official.vision.tasks import image_classification as _ic_task  # noqa: F401  (registration)

from vrgd_tf.model_garden import (
    configs,
    registry,  # noqa: F401  (registration)
)

__all__ = [
    "IMAGENET_TRAIN_EXAMPLES",
    "IMAGENET_VAL_EXAMPLES",
    "BERT_LARGE",
    "VRGDBertPretrainingConfig",
    "VRGDImageClassificationConfig",
    "bert_lamb_optimization",
    "resnet_lars_optimization",
    "vrgd_bert_pretraining",
    "vrgd_resnet_imagenet",
    "vrgd_image_classification",
]

IMAGENET_TRAIN_EXAMPLES = ic_cfg.IMAGENET_TRAIN_EXAMPLES  # 1,281,167
IMAGENET_VAL_EXAMPLES = ic_cfg.IMAGENET_VAL_EXAMPLES  # 50,000

#: The BERT-large encoder of Devlin et al. 2019 (24 layers, hidden 1024, 16 heads, intermediate 4096,
#: uncased WordPiece vocabulary of 30522 tokens, 512 positions).
BERT_LARGE = dict(
    vocab_size=30522,
    hidden_size=1024,
    num_layers=24,
    num_attention_heads=16,
    intermediate_size=4096,
    hidden_activation="gelu",
    dropout_rate=0.1,
    attention_dropout_rate=0.1,
    max_position_embeddings=512,
    type_vocab_size=2,
    initializer_range=0.02,
)

# Model Garden's restrictions on its classification and pretraining experiments.
_RESTRICTIONS = ["task.train_data.is_training != None", "task.validation_data.is_training != None"]

# BERT (NVIDIA's LAMB recipe): no weight decay and no trust ratio for LayerNorm and biases.
_BERT_EXCLUDE = ["LayerNorm", "layer_norm", "bias"]
# MLPerf LARS: no weight decay and no trust ratio for batch norm and biases.
_RESNET_EXCLUDE = ["batch_normalization", "bias"]


@dataclasses.dataclass
class VRGDBertPretrainingConfig(configs.VRGDExperimentConfig):
    """A :class:`~vrgd_tf.model_garden.configs.VRGDExperimentConfig` whose task is Model Garden's ``MaskedLMConfig``."""

    task: masked_lm.MaskedLMConfig = dataclasses.field(default_factory=masked_lm.MaskedLMConfig)


@dataclasses.dataclass
class VRGDImageClassificationConfig(configs.VRGDExperimentConfig):
    """A :class:`~vrgd_tf.model_garden.configs.VRGDExperimentConfig` whose task is ``ImageClassificationTask``."""

    task: ic_cfg.ImageClassificationTask = dataclasses.field(
        default_factory=ic_cfg.ImageClassificationTask
    )


def _trainer_from(
    base: cfg.TrainerConfig, optimization: configs.VRGDOptimizationConfig, **overrides
) -> configs.VRGDTrainerConfig:
    """Model Garden's trainer settings with the VRGD optimization config swapped in."""
    values = base.as_dict()
    values.pop("optimizer_config")
    values.update(overrides)
    trainer = configs.VRGDTrainerConfig(optimizer_config=optimization)
    trainer.override(values, is_strict=True)
    return trainer


def bert_lamb_optimization(
    peak_learning_rate: float,
    train_steps: int,
    warmup_proportion: float,
    *,
    power: float = 0.5,
    weight_decay_rate: float = 0.01,
    gamma: float = configs.VRGDLambConfig.gamma,
    beta_3: float = configs.VRGDLambConfig.beta_3,
    use_vrgd: bool = True,
    global_clipnorm=1.0,
) -> configs.VRGDOptimizationConfig:
    """VR-LAMB (and the same LAMB) with NVIDIA's polynomial warm-up/decay schedule.

    NVIDIA's ``PolyWarmUpScheduler`` (DeepLearningExamples, PyTorch BERT) uses
    ``lr(t) = peak * t / W`` while ``t < W = warmup_proportion * T``, then
    ``peak * (1 - t / T) ** 0.5``. Model Garden's polynomial decay (offset 0,
    ``decay_steps = T``, end 0, power 0.5) reproduces the second part exactly; its
    polynomial warm-up (power 1) ramps linearly to the decay curve's value at ``W``.

    Args:
      peak_learning_rate: ``peak`` above.
      train_steps: ``T``.
      warmup_proportion: fraction of ``T``; ``W = ceil(proportion * T)`` (NVIDIA warms up
        while ``t / T < proportion``).
      power: decay power (NVIDIA: 0.5).
      weight_decay_rate: LAMB decoupled weight decay (NVIDIA: 0.01).
      gamma, beta_3: VRGD settings; default ``configs.VRGDLambConfig``'s (0.1, 0.9).
      use_vrgd: select ``vrgd_lamb`` (True) or ``lamb``.
      global_clipnorm: clip the global gradient norm (NVIDIA's FusedLAMB: 1.0) or None.

    Returns:
      A :class:`~vrgd_tf.model_garden.configs.VRGDOptimizationConfig`.
    """
    warmup_steps = int(math.ceil(warmup_proportion * train_steps - 1e-9))
    lamb = dict(
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-6,
        weight_decay_rate=weight_decay_rate,
        exclude_from_weight_decay=list(_BERT_EXCLUDE),
        exclude_from_layer_adaptation=list(_BERT_EXCLUDE),
        global_clipnorm=global_clipnorm,
    )
    return configs.VRGDOptimizationConfig(
        optimizer=configs.VRGDOptimizerConfig(
            type="vrgd_lamb" if use_vrgd else "lamb",
            vrgd_lamb=configs.VRGDLambConfig(gamma=gamma, beta_3=beta_3, **lamb),
            lamb=mg_cfg.LAMBConfig(**lamb),
        ),
        learning_rate=mg_opt_cfg.LrConfig(
            type="polynomial",
            polynomial=lr_cfg.PolynomialLrConfig(
                initial_learning_rate=peak_learning_rate,
                decay_steps=train_steps,
                end_learning_rate=0.0,
                power=power,
                offset=0,
            ),
        ),
        warmup=mg_opt_cfg.WarmupConfig(
            type="polynomial",
            polynomial=lr_cfg.PolynomialWarmupConfig(power=1.0, warmup_steps=warmup_steps),
        ),
    )


def resnet_lars_optimization(
    global_batch_size: int,
    epochs: float,
    *,
    peak_learning_rate: float = None,
    warmup_epochs: float = None,
    weight_decay_rate: float = 2e-4,
    gamma: float = configs.VRGDLarsConfig.gamma,
    beta_3: float = configs.VRGDLarsConfig.beta_3,
    use_vrgd: bool = True,
    num_examples: int = IMAGENET_TRAIN_EXAMPLES,
) -> configs.VRGDOptimizationConfig:
    """VR-LARS (and the same LARS) with the MLPerf ResNet LARS schedule.

    MLPerf's reference (``lars_util.poly_rate_schedule``): peak learning rate and warm-up by
    batch (below 16k: 10 and 5 epochs; 16k to 32k: 25 and 5; 32k and above: 31.2 and 25),
    linear warm-up from 0 over ``W = warmup_epochs * N // B`` steps, then polynomial decay
    of power 2 to 1e-4 over the remaining ``T - W`` steps (``T = epochs * N // B``);
    momentum 0.9, eeta 0.001, epsilon 0 (Model Garden's LARS has no epsilon term).

    Returns:
      A :class:`~vrgd_tf.model_garden.configs.VRGDOptimizationConfig`.
    """
    if peak_learning_rate is None or warmup_epochs is None:
        if global_batch_size < 16384:
            default = (10.0, 5)
        elif global_batch_size < 32768:
            default = (25.0, 5)
        else:
            default = (31.2, 25)
        peak_learning_rate = default[0] if peak_learning_rate is None else peak_learning_rate
        warmup_epochs = default[1] if warmup_epochs is None else warmup_epochs
    train_steps = int(epochs * num_examples // global_batch_size)
    warmup_steps = int(warmup_epochs * num_examples // global_batch_size)
    lars = dict(
        momentum=0.9,
        eeta=0.001,
        weight_decay_rate=weight_decay_rate,
        nesterov=False,
        classic_momentum=True,
        exclude_from_weight_decay=list(_RESNET_EXCLUDE),
        exclude_from_layer_adaptation=list(_RESNET_EXCLUDE),
    )
    return configs.VRGDOptimizationConfig(
        optimizer=configs.VRGDOptimizerConfig(
            type="vrgd_lars" if use_vrgd else "lars",
            vrgd_lars=configs.VRGDLarsConfig(gamma=gamma, beta_3=beta_3, **lars),
            lars=mg_cfg.LARSConfig(**lars),
        ),
        learning_rate=mg_opt_cfg.LrConfig(
            type="polynomial",
            polynomial=lr_cfg.PolynomialLrConfig(
                initial_learning_rate=peak_learning_rate,
                decay_steps=train_steps - warmup_steps,
                end_learning_rate=1e-4,
                power=2.0,
                offset=warmup_steps,
            ),
        ),
        warmup=mg_opt_cfg.WarmupConfig(
            type="linear",
            linear=lr_cfg.LinearWarmupConfig(warmup_steps=warmup_steps, warmup_learning_rate=0.0),
        ),
    )


@exp_factory.register_config_factory("vrgd_bert_pretraining")
def vrgd_bert_pretraining() -> VRGDBertPretrainingConfig:
    """Model Garden's ``bert/pretraining`` with VR-LAMB; BERT-large 64k/32k phase 1."""
    base = exp_factory.get_exp_config("bert/pretraining")
    train_steps, batch = 7038, 65536
    task = base.task
    task.override(
        {
            "model": {
                "encoder": {"type": "bert", "bert": dict(BERT_LARGE)},
                # The next-sentence head's pooler is as wide as the encoder.
                "cls_heads": [
                    bert_cfg.ClsHeadConfig(
                        inner_dim=1024, num_classes=2, dropout_rate=0.1, name="next_sentence"
                    ).as_dict()
                ],
            },
            # Average the loss over the global batch, as NVIDIA's recipe does, so that the
            # clipping norm means what it does there.
            "scale_loss": True,
        },
        is_strict=True,
    )
    task.train_data = pretrain_dataloader.BertPretrainDataConfig(
        input_path="",
        global_batch_size=batch,
        is_training=True,
        seq_length=128,
        max_predictions_per_seq=20,
        use_next_sentence_label=True,
    )
    task.validation_data = pretrain_dataloader.BertPretrainDataConfig(
        input_path="",
        global_batch_size=1024,
        is_training=False,
        seq_length=128,
        max_predictions_per_seq=20,
        use_next_sentence_label=True,
    )
    trainer = _trainer_from(
        base.trainer,
        bert_lamb_optimization(6e-3, train_steps, 0.2843),
        train_steps=train_steps,
        steps_per_loop=100,
        summary_interval=100,
        checkpoint_interval=1000,
        validation_interval=1000,
        validation_steps=100,
    )
    return VRGDBertPretrainingConfig(
        task=task, trainer=trainer, runtime=base.runtime, restrictions=list(_RESTRICTIONS)
    )


@exp_factory.register_config_factory("vrgd_resnet_imagenet")
def vrgd_resnet_imagenet() -> VRGDImageClassificationConfig:
    """Model Garden's ``resnet_imagenet`` with VR-LARS; ResNet-50 at batch 32768."""
    base = exp_factory.get_exp_config("resnet_imagenet")
    batch, epochs = 32768, 90
    steps_per_epoch = IMAGENET_TRAIN_EXAMPLES // batch
    task = base.task
    task.override(
        {
            # LARS applies the weight decay (2e-4) itself: no L2 term in the loss.
            "losses": {"l2_weight_decay": 0.0, "label_smoothing": 0.1},
            "train_data": {"global_batch_size": batch},
            "validation_data": {"global_batch_size": 4096},
        },
        is_strict=True,
    )
    trainer = _trainer_from(
        base.trainer,
        resnet_lars_optimization(batch, epochs),
        train_steps=epochs * IMAGENET_TRAIN_EXAMPLES // batch,
        steps_per_loop=steps_per_epoch,
        summary_interval=steps_per_epoch,
        checkpoint_interval=4 * steps_per_epoch,
        validation_interval=4 * steps_per_epoch,
        validation_steps=IMAGENET_VAL_EXAMPLES // 4096,
    )
    return VRGDImageClassificationConfig(
        task=task, trainer=trainer, runtime=base.runtime, restrictions=list(_RESTRICTIONS)
    )


@exp_factory.register_config_factory("vrgd_image_classification")
def vrgd_image_classification() -> VRGDImageClassificationConfig:
    """Model Garden's generic ``image_classification`` with the VRGD optimization config.

    The optimizer defaults to VR-LARS with a constant learning rate; set the model, data,
    optimizer and schedule in a YAML file.
    """
    base = exp_factory.get_exp_config("image_classification")
    optimization = configs.VRGDOptimizationConfig(
        optimizer=configs.VRGDOptimizerConfig(type="vrgd_lars"),
        learning_rate=mg_opt_cfg.LrConfig(type="constant"),
    )
    trainer = _trainer_from(base.trainer, optimization)
    return VRGDImageClassificationConfig(
        task=base.task, trainer=trainer, runtime=base.runtime, restrictions=list(_RESTRICTIONS)
    )
