"""Model Garden registration, configs and the YAML files in official_configs/.

Every YAML file is parsed the way tpu_scripts/train.py parses it (Model Garden's
``train_utils.parse_configuration``: strict overrides, validate, lock); its optimizer is
built by Model Garden's ``OptimizerFactory``, and its learning-rate schedule is checked at
step 0, at the end of the warm-up and at the last step against values computed here from the
YAML's own numbers. The recipe arithmetic in the TPU files (NVIDIA's BERT numbers with the
square-root rule, the MLPerf LARS steps from 1,281,167 images) is recomputed here too.
"""

import copy
import dataclasses
import glob
import math
import os
import re
import tempfile

import tensorflow as tf
import tf_keras
import yaml
from official.core import exp_factory, task_factory, train_utils
from official.modeling import hyperparams
from official.modeling.optimization import lamb as mg_lamb
from official.modeling.optimization import lars as mg_lars
from official.modeling.optimization import optimizer_factory

import vrgd_tf.model_garden as vmg
from vrgd_tf import settings as vrgd_settings
from vrgd_tf import tf_keras as vrgd_tf_keras
from vrgd_tf.model_garden import configs as vconfigs
from vrgd_tf.model_garden import registry

import prepare_model_garden_data as prepare_data

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG_DIR = os.path.join(REPO, "official_configs")
IMAGENET = 1281167

ALL_YAMLS = sorted(glob.glob(os.path.join(CONFIG_DIR, "**", "*.yaml"), recursive=True))


def experiment_for(path):
    name = os.path.basename(path)
    if "bert" in name:
        return "vrgd_bert_pretraining"
    if name.startswith("resnet50"):
        return "vrgd_resnet_imagenet"
    return "vrgd_image_classification"


def parse(path, params_override=""):
    """The experiment config exactly as tpu_scripts/train.py builds it."""
    options = train_utils.ParseConfigOptions(
        experiment=experiment_for(path), config_file=[path], params_override=params_override
    )
    return train_utils.parse_configuration(options, print_return=False)


def raw_yaml(path):
    with open(path) as f:
        return yaml.safe_load(f)


def expected_lr(opt, step):
    """The learning rate of a YAML optimization block at ``step``, computed from its numbers.

    Model Garden's semantics: PolynomialDecay(step - offset) with the step clipped to
    decay_steps; linear warm-up from warmup_learning_rate to the decayed value at W;
    polynomial warm-up = value at W times (max(step, 1) / W) ** power.
    """
    lr, wu = opt["learning_rate"], opt["warmup"]
    assert lr["type"] == "polynomial", lr
    p = lr["polynomial"]

    def decay(s):
        s = min(s - p.get("offset", 0), p["decay_steps"])
        frac = 1.0 - s / p["decay_steps"]
        return (p["initial_learning_rate"] - p["end_learning_rate"]) * frac ** p["power"] + p[
            "end_learning_rate"
        ]

    if wu["type"] == "linear":
        w = wu["linear"]
        if step < w["warmup_steps"]:
            start = w.get("warmup_learning_rate", 0.0)
            return start + step / w["warmup_steps"] * (decay(w["warmup_steps"]) - start)
    elif wu["type"] == "polynomial":
        w = wu["polynomial"]
        if step < w["warmup_steps"]:
            return decay(w["warmup_steps"]) * (max(step, 1) / w["warmup_steps"]) ** w["power"]
    else:
        raise AssertionError(wu)
    return decay(step)


def warmup_steps(opt):
    wu = opt["warmup"]
    return wu[wu["type"]]["warmup_steps"]


class RegistryTest(tf.test.TestCase):
    def test_types_map_to_vrgd_classes(self):
        expected = {
            "vrgd_sgd": vrgd_tf_keras.VRGDSGD,
            "vrgd_adam": vrgd_tf_keras.VRGDAdam,
            "vrgd_lars": vrgd_tf_keras.VRGDLars,
            "vrgd_lamb": vrgd_tf_keras.VRGDLamb,
        }
        self.assertEqual(set(vmg.OPTIMIZER_TYPES), set(expected))
        for key, cls in expected.items():
            self.assertIs(optimizer_factory.LEGACY_OPTIMIZERS_CLS[key], cls)
        # As Model Garden does for its own lamb/lars (OptimizerV2 classes on both paths).
        self.assertIs(optimizer_factory.NEW_OPTIMIZERS_CLS["vrgd_lamb"], vrgd_tf_keras.VRGDLamb)
        self.assertIs(optimizer_factory.NEW_OPTIMIZERS_CLS["vrgd_lars"], vrgd_tf_keras.VRGDLars)

    def test_register_is_idempotent_and_refuses_a_conflict(self):
        registry.register()
        registry.register()
        self.assertIs(optimizer_factory.LEGACY_OPTIMIZERS_CLS["vrgd_lamb"], vrgd_tf_keras.VRGDLamb)
        saved = optimizer_factory.LEGACY_OPTIMIZERS_CLS["vrgd_adam"]
        try:
            optimizer_factory.LEGACY_OPTIMIZERS_CLS["vrgd_adam"] = tf_keras.optimizers.legacy.Adam
            with self.assertRaisesRegex(ValueError, "vrgd_adam.*already registered"):
                registry.register()
        finally:
            optimizer_factory.LEGACY_OPTIMIZERS_CLS["vrgd_adam"] = saved

    def test_every_type_builds_with_defaults(self):
        for key, cls in registry.LEGACY_CLASSES.items():
            config = vconfigs.VRGDOptimizationConfig(
                {
                    "optimizer": {"type": key},
                    "learning_rate": {"type": "constant", "constant": {"learning_rate": 0.5}},
                }
            )
            factory = optimizer_factory.OptimizerFactory(config)
            opt = factory.build_optimizer(factory.build_learning_rate())
            self.assertIsInstance(opt, cls)
            default = vconfigs.VRGD_CONFIG_FIELDS[key]()
            self.assertEqual((opt.gamma, opt.beta_3), (default.gamma, default.beta_3))
            self.assertEqual(opt._name, default.name)
            self.assertAllClose(opt._get_hyper("learning_rate"), 0.5)
        self.assertEqual(vconfigs.VRGDAdamConfig().beta_3, 0.9)
        self.assertEqual(vconfigs.VRGDLambConfig().beta_3, 0.9)
        self.assertEqual(vconfigs.VRGDSGDConfig().beta_3, 0.0)
        self.assertEqual(vconfigs.VRGDLarsConfig().beta_3, 0.0)

    def test_gradient_aggregator_is_refused(self):
        """docs/model_garden.md: build_optimizer(gradient_aggregator=...) raises ValueError."""
        for key in registry.LEGACY_CLASSES:
            factory = optimizer_factory.OptimizerFactory(
                vconfigs.VRGDOptimizationConfig(
                    {"optimizer": {"type": key}, "learning_rate": {"type": "constant"}}
                )
            )
            with self.assertRaisesRegex(ValueError, "gradient_aggregator.*VRGD"):
                factory.build_optimizer(
                    factory.build_learning_rate(),
                    gradient_aggregator=lambda grads_and_vars: grads_and_vars,
                )

    def test_non_legacy_path(self):
        for key in ("vrgd_sgd", "vrgd_adam"):
            factory = optimizer_factory.OptimizerFactory(
                vconfigs.VRGDOptimizationConfig(
                    {"optimizer": {"type": key}, "learning_rate": {"type": "constant"}}
                )
            )
            config = factory._optimizer_config.as_dict()
            config.pop("decay", None)
            with self.assertRaisesRegex(ValueError, "use_legacy_optimizer=True"):
                optimizer_factory.NEW_OPTIMIZERS_CLS[key](**config)

    def test_configs_extend_model_garden_configs(self):
        from official.modeling.optimization.configs import optimizer_config as mg_cfg

        bases = {
            "vrgd_sgd": mg_cfg.SGDConfig,
            "vrgd_adam": mg_cfg.AdamConfig,
            "vrgd_lars": mg_cfg.LARSConfig,
            "vrgd_lamb": mg_cfg.LAMBConfig,
        }
        for key, config_cls in vconfigs.VRGD_CONFIG_FIELDS.items():
            self.assertTrue(issubclass(config_cls, bases[key]), key)
            fields = {f.name for f in dataclasses.fields(config_cls)}
            self.assertTrue({"gamma", "beta_3", "name"} <= fields, key)


class ExperimentConfigTest(tf.test.TestCase):
    EXPERIMENTS = ("vrgd_bert_pretraining", "vrgd_resnet_imagenet", "vrgd_image_classification")

    def test_experiments_carry_the_vrgd_types(self):
        for name in self.EXPERIMENTS:
            config = exp_factory.get_exp_config(name)
            config.validate()
            self.assertIsInstance(config, vconfigs.VRGDExperimentConfig)
            self.assertIsInstance(config.trainer, vconfigs.VRGDTrainerConfig)
            self.assertIsInstance(config.trainer.optimizer_config, vconfigs.VRGDOptimizationConfig)
            self.assertIsInstance(
                config.trainer.optimizer_config.optimizer, vconfigs.VRGDOptimizerConfig
            )

    def test_defaults_are_the_large_batch_recipes(self):
        bert = exp_factory.get_exp_config("vrgd_bert_pretraining")
        opt = bert.trainer.optimizer_config
        self.assertEqual(opt.optimizer.type, "vrgd_lamb")
        self.assertEqual(bert.task.train_data.global_batch_size, 65536)
        self.assertEqual(bert.task.model.encoder.bert.num_layers, 24)
        self.assertEqual(opt.learning_rate.polynomial.initial_learning_rate, 6e-3)
        self.assertEqual(opt.warmup.polynomial.warmup_steps, math.ceil(0.2843 * 7038))
        resnet = exp_factory.get_exp_config("vrgd_resnet_imagenet")
        opt = resnet.trainer.optimizer_config
        self.assertEqual(opt.optimizer.type, "vrgd_lars")
        self.assertEqual(opt.learning_rate.polynomial.initial_learning_rate, 31.2)
        self.assertEqual(opt.warmup.linear.warmup_steps, 25 * IMAGENET // 32768)
        self.assertEqual(resnet.trainer.train_steps, 90 * IMAGENET // 32768)
        self.assertEqual(resnet.task.losses.l2_weight_decay, 0.0)

    def test_params_override_reaches_the_optimizer(self):
        config = exp_factory.get_exp_config("vrgd_bert_pretraining")
        hyperparams.override_params_dict(
            config,
            "trainer.optimizer_config.optimizer.vrgd_lamb.gamma=0.2,"
            "trainer.optimizer_config.optimizer.vrgd_lamb.beta_3=0.5",
            is_strict=True,
        )
        config.validate()
        factory = optimizer_factory.OptimizerFactory(config.trainer.optimizer_config)
        opt = factory.build_optimizer(factory.build_learning_rate())
        self.assertIsInstance(opt, vrgd_tf_keras.VRGDLamb)
        self.assertEqual((opt.gamma, opt.beta_3), (0.2, 0.5))
        self.assertAllClose(opt._get_hyper("weight_decay_rate"), 0.01)

    def test_baseline_is_one_override_away(self):
        config = exp_factory.get_exp_config("vrgd_resnet_imagenet")
        hyperparams.override_params_dict(
            config, "trainer.optimizer_config.optimizer.type=lars", is_strict=True
        )
        factory = optimizer_factory.OptimizerFactory(config.trainer.optimizer_config)
        opt = factory.build_optimizer(factory.build_learning_rate())
        self.assertIs(type(opt), mg_lars.LARS)
        self.assertEqual(opt.weight_decay_rate, 2e-4)
        self.assertEqual(opt.exclude_from_weight_decay, ["batch_normalization", "bias"])

    def test_misspelled_keys_fail_naming_the_key(self):
        for override, key in (
            ("trainer.optimizer_config.optimizer.vrgd_lamb.gama=0.2", "gama"),
            ("trainer.optimizer_config.optimizer.vrgd_lam.gamma=0.2", "vrgd_lam"),
            ("trainer.optimizer_config.optimizr.type=vrgd_lamb", "optimizr"),
        ):
            config = exp_factory.get_exp_config("vrgd_bert_pretraining")
            with self.assertRaisesRegex(KeyError, f"'{key}'"):
                hyperparams.override_params_dict(config, override, is_strict=True)
        # The same through a YAML file, as --config_file passes it.
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            f.write(
                "trainer:\n  optimizer_config:\n    optimizer:\n      type: vrgd_lamb\n"
                "      vrgd_lamb:\n        gama: 0.2\n"
            )
        self.addCleanup(os.remove, f.name)
        with self.assertRaisesRegex(KeyError, "'gama'"):
            train_utils.parse_configuration(
                train_utils.ParseConfigOptions(
                    experiment="vrgd_bert_pretraining", config_file=[f.name]
                ),
                print_return=False,
            )

    def test_construction_from_a_dict_is_strict(self):
        config = vconfigs.VRGDOptimizationConfig(
            {"optimizer": {"type": "vrgd_lars", "vrgd_lars": {"gamma": 0.3}}}
        )
        self.assertEqual(config.optimizer.vrgd_lars.gamma, 0.3)
        for bad, key in (
            ({"optimizer": {"vrgd_lars": {"gama": 0.3}}}, "gama"),
            ({"optimiser": {}}, "optimiser"),
        ):
            with self.assertRaisesRegex(KeyError, f"'{key}'"):
                vconfigs.VRGDOptimizationConfig(bad)
        with self.assertRaisesRegex(KeyError, "'beta3'"):
            vconfigs.VRGDLambConfig({"beta3": 0.5})
        with self.assertRaisesRegex(KeyError, "'train_step'"):
            vconfigs.VRGDTrainerConfig({"train_step": 5})

    def test_unknown_type_and_bad_values_fail_at_validate(self):
        config = exp_factory.get_exp_config("vrgd_bert_pretraining")
        hyperparams.override_params_dict(
            config, "trainer.optimizer_config.optimizer.type=vrgd_lam", is_strict=True
        )
        with self.assertRaisesRegex(KeyError, "vrgd_lam.*known types:.*vrgd_lamb"):
            config.validate()
        for field, value in (
            ("gamma", 0.0),
            ("gamma", 1.5),
            ("beta_3", 1.0),
            ("statistics_interval", -1),
        ):
            config = exp_factory.get_exp_config("vrgd_resnet_imagenet")
            hyperparams.override_params_dict(
                config,
                f"trainer.optimizer_config.optimizer.vrgd_lars.{field}={value}",
                is_strict=True,
            )
            with self.assertRaisesRegex(
                ValueError, f"optimizer.vrgd_lars.{field}: `{field}` must be"
            ):
                config.validate()

    def test_deepcopy_and_as_dict_round_trip(self):
        for name in self.EXPERIMENTS:
            config = exp_factory.get_exp_config(name)
            as_dict = config.as_dict()
            self.assertEqual(copy.deepcopy(config).as_dict(), as_dict)
            rebuilt = type(config)(as_dict)
            self.assertEqual(rebuilt.as_dict(), as_dict)
            # Rebuilt from a plain dict, the VRGD fields keep their types and strictness.
            self.assertIsInstance(
                rebuilt.trainer.optimizer_config.optimizer, vconfigs.VRGDOptimizerConfig
            )
            with self.assertRaisesRegex(KeyError, "'gama'"):
                rebuilt.override(
                    {"trainer": {"optimizer_config": {"optimizer": {"vrgd_lars": {"gama": 0.3}}}}},
                    is_strict=True,
                )
            yaml_path = os.path.join(self.get_temp_dir(), f"{name}.yaml")
            hyperparams.save_params_dict_to_yaml(config, yaml_path)
            reparsed = exp_factory.get_exp_config(name)
            hyperparams.override_params_dict(reparsed, yaml_path, is_strict=True)
            self.assertEqual(reparsed.as_dict(), as_dict)

    def test_replace_keeps_the_types(self):
        config = exp_factory.get_exp_config("vrgd_resnet_imagenet")
        config.lock()
        replaced = config.replace(
            trainer={"optimizer_config": {"optimizer": {"vrgd_lars": {"gamma": 0.3}}}}
        )
        self.assertEqual(replaced.trainer.optimizer_config.optimizer.vrgd_lars.gamma, 0.3)
        self.assertEqual(config.trainer.optimizer_config.optimizer.vrgd_lars.gamma, 0.1)
        self.assertIsInstance(replaced.trainer, vconfigs.VRGDTrainerConfig)


class YamlFilesTest(tf.test.TestCase):
    """Every YAML in official_configs/ parses, builds its optimizer and its schedule."""

    def test_expected_files_exist(self):
        names = {os.path.relpath(p, CONFIG_DIR) for p in ALL_YAMLS}
        for variant in ("64k32k", "32k", "128k64k"):
            for phase in (1, 2):
                self.assertIn(f"bert_large_vrlamb_{variant}_phase{phase}.yaml", names)
        for batch in ("32k", "64k", "96k"):
            self.assertIn(f"resnet50_vrlars_{batch}.yaml", names)
        for name in (
            "tiny_bert_shakespeare_vrlamb",
            "tiny_bert_shakespeare_lamb",
            "tiny_resnet_digits_vrlars",
            "tiny_resnet_digits_lars",
        ):
            self.assertIn(f"cpu/{name}.yaml", names)

    def test_every_yaml(self):
        for path in ALL_YAMLS:
            with self.subTest(path=os.path.relpath(path, REPO)):
                self._check_yaml(path)

    def _check_yaml(self, path):
        raw = raw_yaml(path)
        config = parse(path)
        opt_yaml = raw["trainer"]["optimizer_config"]
        opt_type = opt_yaml["optimizer"]["type"]
        self.assertEqual(config.trainer.optimizer_config.optimizer.type, opt_type)

        factory = optimizer_factory.OptimizerFactory(config.trainer.optimizer_config)
        lr = factory.build_learning_rate()
        opt = factory.build_optimizer(lr)
        expected_cls = {
            "vrgd_lamb": vrgd_tf_keras.VRGDLamb,
            "vrgd_lars": vrgd_tf_keras.VRGDLars,
            "lamb": mg_lamb.LAMB,
            "lars": mg_lars.LARS,
        }[opt_type]
        self.assertIs(type(opt), expected_cls)
        block = opt_yaml["optimizer"][opt_type]
        if opt_type.startswith("vrgd_"):
            self.assertEqual(opt.gamma, block["gamma"])
            self.assertEqual(opt.beta_3, block["beta_3"])
        else:
            self.assertFalse(hasattr(opt, "gamma"))
        for key in ("exclude_from_weight_decay", "exclude_from_layer_adaptation"):
            self.assertEqual(getattr(opt, key), block[key])
        if "global_clipnorm" in block:
            self.assertEqual(opt.global_clipnorm, block["global_clipnorm"])

        # The schedule at step 0, the end of the warm-up and the last step.
        train_steps = raw["trainer"]["train_steps"]
        w = warmup_steps(opt_yaml)
        for step in (0, w, train_steps - 1):
            # float32 schedule: 1 - step / T loses ~1e-7 / (1 / T) relative at the last step.
            self.assertAllClose(
                float(lr(step)), expected_lr(opt_yaml, step), rtol=2e-4, atol=0, msg=f"step {step}"
            )
        self.assertGreater(float(lr(w)), float(lr(train_steps - 1)))
        # The decay ends with the training.
        poly = opt_yaml["learning_rate"]["polynomial"]
        self.assertEqual(poly.get("offset", 0) + poly["decay_steps"], train_steps)
        self.assertEqual(config.trainer.train_steps, train_steps)

        name = os.path.basename(path)
        if os.path.dirname(path) == CONFIG_DIR:  # TPU configs.
            self.assertEqual(config.runtime.distribution_strategy, "tpu")
            self.assertEqual(config.runtime.mixed_precision_dtype, "bfloat16")
            for split in ("train_data", "validation_data"):
                self.assertIn("${DATA_DIR}", getattr(config.task, split).input_path)
        else:
            self.assertEqual(config.runtime.distribution_strategy, "mirrored")
            self.assertEqual(config.runtime.num_gpus, 0)
        if name.startswith("bert_large"):
            self._check_bert_large(name, config, opt_yaml)
        elif name.startswith("resnet50"):
            self._check_resnet50(name, config, opt_yaml)

    def _check_bert_large(self, name, config, opt_yaml):
        bert = config.task.model.encoder.bert
        self.assertEqual(
            (
                bert.num_layers,
                bert.hidden_size,
                bert.num_attention_heads,
                bert.intermediate_size,
                bert.vocab_size,
            ),
            (24, 1024, 16, 4096, 30522),
        )
        variant, phase = re.match(r"bert_large_vrlamb_(\w+)_phase(\d)\.yaml", name).groups()
        phase = int(phase)
        # NVIDIA's 64k/32k recipe ...
        nvidia = {1: (65536, 7038, 6e-3, 0.2843), 2: (32768, 1563, 4e-3, 0.128)}
        # ... and our variants: (batch, steps) per phase; LR by the square-root rule.
        layout = {
            "64k32k": {1: (65536, 7038), 2: (32768, 1563)},
            "32k": {1: (32768, 15625 - 1563), 2: (32768, 1563)},
            "128k64k": {1: (131072, 3519), 2: (65536, 4301 - 3519)},
        }
        batch, steps = layout[variant][phase]
        ref_batch, _, ref_lr, proportion = nvidia[phase]
        data = config.task.train_data
        self.assertEqual(data.global_batch_size, batch)
        self.assertEqual(config.trainer.train_steps, steps)
        self.assertEqual(
            (data.seq_length, data.max_predictions_per_seq), (128, 20) if phase == 1 else (512, 80)
        )
        poly = opt_yaml["learning_rate"]["polynomial"]
        self.assertAllClose(
            poly["initial_learning_rate"], ref_lr * math.sqrt(batch / ref_batch), rtol=1e-5
        )
        self.assertEqual(
            (poly["power"], poly["end_learning_rate"], poly.get("offset", 0)), (0.5, 0.0, 0)
        )
        self.assertEqual(
            opt_yaml["warmup"]["polynomial"]["warmup_steps"], math.ceil(proportion * steps)
        )
        self.assertEqual(config.task.init_checkpoint, "${MODEL_DIR}/phase1" if phase == 2 else "")
        self.assertTrue(config.task.scale_loss)
        # The `lamb` block mirrors `vrgd_lamb` for the baseline.
        blocks = opt_yaml["optimizer"]
        vr = {
            k: v
            for k, v in blocks["vrgd_lamb"].items()
            if k not in ("gamma", "beta_3", "statistics_interval", "squares_dtype")
        }
        self.assertEqual(vr, blocks["lamb"])
        self.assertEqual((blocks["vrgd_lamb"]["gamma"], blocks["vrgd_lamb"]["beta_3"]), (0.1, 0.9))
        self.assertEqual(blocks["vrgd_lamb"]["statistics_interval"], config.trainer.steps_per_loop)

    def _check_resnet50(self, name, config, opt_yaml):
        batch = {"32k": 32768, "64k": 65536, "96k": 98304}[
            re.match(r"resnet50_vrlars_(\w+)\.yaml", name).group(1)
        ]
        self.assertEqual(config.task.train_data.global_batch_size, batch)
        self.assertEqual(config.task.model.backbone.resnet.model_id, 50)
        self.assertEqual(config.task.losses.label_smoothing, 0.1)
        self.assertEqual(config.task.losses.l2_weight_decay, 0.0)
        w, t = 25 * IMAGENET // batch, 90 * IMAGENET // batch
        self.assertEqual(config.trainer.train_steps, t)
        self.assertEqual(opt_yaml["warmup"]["linear"]["warmup_steps"], w)
        poly = opt_yaml["learning_rate"]["polynomial"]
        self.assertEqual(
            (
                poly["initial_learning_rate"],
                poly["power"],
                poly["offset"],
                poly["decay_steps"],
                poly["end_learning_rate"],
            ),
            (31.2, 2.0, w, t - w, 1e-4),
        )
        blocks = opt_yaml["optimizer"]
        vr = {
            k: v
            for k, v in blocks["vrgd_lars"].items()
            if k not in ("gamma", "beta_3", "statistics_interval", "squares_dtype")
        }
        self.assertEqual(vr, blocks["lars"])
        self.assertEqual(vr["weight_decay_rate"], 2e-4)
        self.assertEqual((vr["momentum"], vr["eeta"]), (0.9, 0.001))
        self.assertEqual((blocks["vrgd_lars"]["gamma"], blocks["vrgd_lars"]["beta_3"]), (0.1, 0.0))
        self.assertEqual(blocks["vrgd_lars"]["statistics_interval"], config.trainer.steps_per_loop)

    def test_cpu_pairs_differ_only_in_the_optimizer(self):
        for vr, base, opt in (
            ("tiny_bert_shakespeare_vrlamb", "tiny_bert_shakespeare_lamb", "lamb"),
            ("tiny_resnet_digits_vrlars", "tiny_resnet_digits_lars", "lars"),
        ):
            a = parse(os.path.join(CONFIG_DIR, "cpu", vr + ".yaml")).as_dict()
            b = parse(os.path.join(CONFIG_DIR, "cpu", base + ".yaml")).as_dict()
            opt_a = a["trainer"].pop("optimizer_config")
            opt_b = b["trainer"].pop("optimizer_config")
            self.assertEqual(a, b)
            self.assertEqual(opt_a["optimizer"]["type"], "vrgd_" + opt)
            self.assertEqual(opt_b["optimizer"]["type"], opt)
            settings_a = dict(opt_a["optimizer"]["vrgd_" + opt])
            settings_b = dict(opt_b["optimizer"][opt])
            for key in vrgd_settings.CONFIG_KEYS + ("name",):  # the VRGD settings, each once
                settings_a.pop(key)
            settings_b.pop("name")
            self.assertEqual(settings_a, settings_b)
            self.assertEqual(opt_a["learning_rate"], opt_b["learning_rate"])
            self.assertEqual(opt_a["warmup"], opt_b["warmup"])

    def test_cpu_configs_match_the_prepared_data(self):
        bert = parse(os.path.join(CONFIG_DIR, "cpu", "tiny_bert_shakespeare_vrlamb.yaml"))
        self.assertEqual(bert.task.model.encoder.bert.vocab_size, prepare_data.TINY_BERT_VOCAB_SIZE)
        for data in (bert.task.train_data, bert.task.validation_data):
            self.assertEqual(data.seq_length, prepare_data.TINY_BERT_SEQ_LENGTH)
            self.assertEqual(data.max_predictions_per_seq, prepare_data.TINY_BERT_MAX_PREDICTIONS)
        resnet = parse(os.path.join(CONFIG_DIR, "cpu", "tiny_resnet_digits_vrlars.yaml"))
        size = prepare_data.DIGITS_IMAGE_SIZE
        self.assertEqual(resnet.task.model.input_size, [size, size, 3])
        self.assertFalse(resnet.task.train_data.decode_jpeg_only)  # PNG records
        overrides = prepare_data.params_overrides("/data")
        parse(os.path.join(CONFIG_DIR, "cpu", "tiny_resnet_digits_lars.yaml"), overrides["digits"])

    def test_exclusion_patterns_match_model_garden_variable_names(self):
        # LayerNorm/batch-norm parameters and biases must be caught by the YAMLs' patterns.
        for yaml_name, opt_type in (
            ("tiny_bert_shakespeare_vrlamb", "vrgd_lamb"),
            ("tiny_resnet_digits_vrlars", "vrgd_lars"),
        ):
            config = parse(os.path.join(CONFIG_DIR, "cpu", yaml_name + ".yaml"))
            patterns = getattr(
                config.trainer.optimizer_config.optimizer, opt_type
            ).exclude_from_weight_decay
            task = task_factory.get_task(config.task)
            model = task.build_model()
            if "bert" in yaml_name:
                dummy = task.build_inputs(config.task.train_data.replace(input_path="dummy"))
                model(next(iter(dummy)), training=False)  # builds the masked-LM head
            names = [v.name for v in model.trainable_variables]
            for var_name in names:
                excluded = any(re.search(p, var_name) for p in patterns)
                normalisation_or_bias = bool(re.search(r"(gamma|beta|bias):0$", var_name))
                self.assertEqual(excluded, normalisation_or_bias, var_name)


if __name__ == "__main__":
    tf.test.main()
