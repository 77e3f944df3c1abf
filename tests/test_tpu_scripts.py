"""The launchers in tpu_scripts/ and train.py's refusals (all through subprocesses)."""

import os
import shlex
import subprocess
import sys

import tensorflow as tf

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(REPO, "tpu_scripts")
REQUIRED = ("TPU_NAME", "MODEL_DIR", "DATA_DIR")


def run_script(name, *args, env=None):
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in REQUIRED + ("DRY_RUN", "OPTIMIZER", "PHASES", "EXTRA_PARAMS_OVERRIDE", "PYTHON")
    }
    base.update(env or {})
    return subprocess.run(
        ["bash", os.path.join(SCRIPTS, name), *args],
        env=base,
        capture_output=True,
        text=True,
        timeout=60,
    )


def commands(stdout):
    """The echoed commands (lines starting with '+ '), split as a shell would."""
    return [shlex.split(line[2:]) for line in stdout.splitlines() if line.startswith("+ ")]


def flag_values(argv):
    out = {}
    for arg in argv:
        if arg.startswith("--") and "=" in arg:
            key, value = arg[2:].split("=", 1)
            out[key] = value
    return out


ENV = {
    "TPU_NAME": "my-tpu",
    "MODEL_DIR": "gs://bucket/run 1",
    "DATA_DIR": "gs://bucket/data",
    "DRY_RUN": "1",
}


class LauncherTest(tf.test.TestCase):
    def test_refuse_without_environment(self):
        for script in ("run_bert_pretraining.sh", "run_resnet.sh"):
            result = run_script(script, env={"DRY_RUN": "1"})
            self.assertNotEqual(result.returncode, 0, script)
            self.assertIn(
                "missing required environment variable(s): TPU_NAME MODEL_DIR DATA_DIR",
                result.stderr,
            )
            self.assertEqual(commands(result.stdout), [])
            # Only the missing ones are named.
            result = run_script(script, env={"DRY_RUN": "1", "TPU_NAME": "t", "DATA_DIR": "gs://d"})
            self.assertNotEqual(result.returncode, 0)
            self.assertRegex(result.stderr, r"variable\(s\): MODEL_DIR\n")
            # Empty counts as missing.
            result = run_script(
                script,
                env={"DRY_RUN": "1", "TPU_NAME": "", "DATA_DIR": "gs://d", "MODEL_DIR": "gs://m"},
            )
            self.assertNotEqual(result.returncode, 0)
            self.assertRegex(result.stderr, r"variable\(s\): TPU_NAME\n")

    def test_unknown_variant_or_optimizer(self):
        result = run_script("run_resnet.sh", "48k", env=ENV)
        self.assertEqual(result.returncode, 2)
        self.assertIn("unknown variant '48k'", result.stderr)
        result = run_script("run_bert_pretraining.sh", "64k", env=ENV)
        self.assertEqual(result.returncode, 2)
        result = run_script("run_bert_pretraining.sh", env=dict(ENV, OPTIMIZER="adam"))
        self.assertEqual(result.returncode, 2)
        self.assertIn("OPTIMIZER must be vrgd_lamb or lamb", result.stderr)

    def test_bert_dry_run_prints_both_phases(self):
        for variant in ("64k32k", "32k", "128k64k"):
            result = run_script("run_bert_pretraining.sh", variant, env=ENV)
            self.assertEqual(result.returncode, 0, result.stderr)
            cmds = commands(result.stdout)
            self.assertLen(cmds, 2)
            for phase, argv in enumerate(cmds, start=1):
                self.assertEqual(argv[0], "python3")
                self.assertEqual(argv[1], os.path.join(SCRIPTS, "train.py"))
                flags = flag_values(argv)
                seq, mp = (128, 20) if phase == 1 else (512, 80)
                self.assertEqual(flags["experiment"], "vrgd_bert_pretraining")
                self.assertEqual(flags["mode"], "train" if phase == 1 else "train_and_eval")
                self.assertEqual(flags["tpu"], "my-tpu")
                self.assertEqual(flags["model_dir"], f"gs://bucket/run 1/phase{phase}")
                config = os.path.join(
                    REPO, "official_configs", f"bert_large_vrlamb_{variant}_phase{phase}.yaml"
                )
                self.assertEqual(flags["config_file"], config)
                self.assertTrue(os.path.exists(config))
                expected = [
                    f"task.train_data.input_path=gs://bucket/data/seq_{seq}_mp_{mp}/train/*",
                    f"task.validation_data.input_path=gs://bucket/data/seq_{seq}_mp_{mp}/eval/*",
                ]
                if phase == 2:
                    expected.append("task.init_checkpoint=gs://bucket/run 1/phase1")
                expected.append("trainer.optimizer_config.optimizer.type=vrgd_lamb")
                self.assertEqual(flags["params_override"].split(","), expected)

    def test_resnet_dry_run_and_options(self):
        result = run_script(
            "run_resnet.sh",
            "96k",
            "--enable_async_checkpointing",
            env=dict(ENV, OPTIMIZER="lars", EXTRA_PARAMS_OVERRIDE="a.b=1"),
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        (argv,) = commands(result.stdout)
        flags = flag_values(argv)
        self.assertEqual(flags["experiment"], "vrgd_resnet_imagenet")
        self.assertEqual(flags["mode"], "train_and_eval")
        self.assertEqual(flags["model_dir"], "gs://bucket/run 1")
        self.assertEqual(
            flags["config_file"], os.path.join(REPO, "official_configs", "resnet50_vrlars_96k.yaml")
        )
        self.assertEqual(
            flags["params_override"].split(","),
            [
                "task.train_data.input_path=gs://bucket/data/train*",
                "task.validation_data.input_path=gs://bucket/data/valid*",
                "trainer.optimizer_config.optimizer.type=lars",
                "a.b=1",
            ],
        )
        self.assertEqual(argv[-1], "--enable_async_checkpointing")
        # Default variant is 32k.
        (argv,) = commands(run_script("run_resnet.sh", env=ENV).stdout)
        self.assertTrue(flag_values(argv)["config_file"].endswith("resnet50_vrlars_32k.yaml"))

    def test_without_dry_run_the_command_runs(self):
        # PYTHON stands in for the interpreter: `echo` proves the command is executed.
        env = dict(ENV, PYTHON="echo", PHASES="2")
        env.pop("DRY_RUN")
        result = run_script("run_bert_pretraining.sh", "32k", env=env)
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = result.stdout.splitlines()
        self.assertLen(commands(result.stdout), 1)
        executed = [line for line in lines if line.startswith(os.path.join(SCRIPTS, "train.py"))]
        self.assertLen(executed, 1)
        self.assertIn("--model_dir=gs://bucket/run 1/phase2", executed[0])


class TrainPyRefusalTest(tf.test.TestCase):
    def test_placeholders_and_typos_are_refused(self):
        config = os.path.join(REPO, "official_configs", "resnet50_vrlars_32k.yaml")
        base = [
            sys.executable,
            os.path.join(SCRIPTS, "train.py"),
            "--experiment=vrgd_resnet_imagenet",
            "--mode=train",
            f"--model_dir={self.get_temp_dir()}/m",
            f"--config_file={config}",
            "--cpu_replicas=2",
        ]
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
        # Both at once: each mostly waits for its imports.
        procs = [
            subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
            )
            for argv in (
                base,
                base + ["--params_override=trainer.optimizer_config.optimizer.vrgd_lars.gama=0.2"],
            )
        ]
        (_, placeholder_err), (_, typo_err) = [p.communicate(timeout=240) for p in procs]
        self.assertEqual(procs[0].returncode, 1)
        self.assertIn("placeholders that YAML does not expand", placeholder_err)
        self.assertIn("task.train_data.input_path = '${DATA_DIR}/train*'", placeholder_err)
        self.assertIn("task.validation_data.input_path = '${DATA_DIR}/valid*'", placeholder_err)
        self.assertIn("--params_override", placeholder_err)
        self.assertNotEqual(procs[1].returncode, 0)
        self.assertIn("KeyError: \"The key 'gama' does not exist", typo_err)


class OrbitLinesOnceTest(tf.test.TestCase):
    """train.py shows each Orbit loop line once: Orbit's controller logs and prints it, and
    train.py's filter drops the logged copy (its INFO records), in a subprocess that logs
    through absl's handler as ``app.run`` sets it up."""

    def test_orbit_info_records_are_dropped_and_others_kept(self):
        code = (
            "import logging, sys\n"
            "sys.path.insert(0, sys.argv[1])\n"
            "import train\n"
            "from absl import logging as absl_logging\n"
            "import orbit.controller as c\n"
            "f = train.OrbitPrintedFilter()\n"
            "def rec(path, level):\n"
            "    return logging.LogRecord('absl', level, path, 1, 'm', None, None)\n"
            "print(f.filter(rec(c.__file__, logging.INFO)),"
            " f.filter(rec(c.__file__, logging.WARNING)),"
            " f.filter(rec(train.__file__, logging.INFO)))\n"
            "absl_logging.set_verbosity(absl_logging.INFO)\n"
            "absl_logging.use_absl_handler()  # as app.run does\n"
            "absl_logging.get_absl_handler().addFilter(f)\n"
            "# A caller in controller.py, as its loops call _log (absl skips _log's frame).\n"
            "exec(compile('def loop(m):\\n    _log(m)\\n', c.__file__, 'exec'), vars(c))\n"
            "c.loop('train | step: 7 | once')\n"
        )
        result = subprocess.run(
            [sys.executable, "-c", code, SCRIPTS],
            capture_output=True,
            text=True,
            timeout=300,
            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
        )
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        self.assertIn("False True True", result.stdout)
        both = result.stdout + result.stderr
        self.assertEqual(both.count("train | step: 7 | once"), 1, both[-2000:])


if __name__ == "__main__":
    tf.test.main()
