"""Writes sklearn's real 8x8 digits as Model Garden classification TFRecords.

The source is `sklearn.datasets.load_digits`: 1,797 real handwritten digits
(8x8 grayscale, integer intensities 0..16, 10 classes) shipped inside
scikit-learn, so nothing is downloaded.

Each example is a `tf.train.Example` built with Model Garden's
`official.vision.data.tf_example_builder.TfExampleBuilder`, i.e. it carries the
keys that `official.vision.dataloaders.classification_input.Decoder` reads:

  * `image/encoded`     PNG (default) or JPEG bytes, `image_size` x
                        `image_size` x 3, uint8 0..255;
  * `image/class/label` int64 digit class 0..9;

plus the metadata that builder always adds: `image/format`, `image/height`,
`image/width`, `image/channels` and `image/source_id` (the row index of the
image in `load_digits()`, as a decimal string).

Pixel rule (exact, so it can be checked independently):

  * intensity: `uint8 = floor(v * 255 / 16 + 1/2)` for the source value
    v in 0..16, i.e. `(255 * v + 8) // 16` (0 -> 0, 8 -> 128, 16 -> 255);
  * size: nearest-neighbour upscaling, output pixel (i, j) takes source pixel
    (floor(i * 8 / image_size), floor(j * 8 / image_size)); for multiples of
    8 (e.g. the default 32) every source pixel becomes an s x s block;
  * channels: the gray value is repeated in R, G and B.

The train/validation split is stratified by class and seeded
(`sklearn.model_selection.train_test_split`), so it is identical run to run.
Files are sharded with Model Garden's `tfrecord_lib.write_tf_record_dataset`
(round-robin over shards) as `train-00000-of-0000N.tfrecord` and
`validation-00000-of-0000N.tfrecord`.

Reading: with the default PNG encoding, Model Garden's classification
`Parser` must be built with `decode_jpeg_only=False` (its JPEG-only fast path
calls `tf.image.extract_jpeg_shape`, which rejects PNG); for the
image-classification task config that is `DataConfig.decode_jpeg_only=False`.
PNG keeps the pixels lossless; pass `image_format='JPEG'` for the JPEG path.

Command line:

  python3 examples/data/digits_tfrecords.py --output_dir=/tmp/digits_tfrecords
"""

from __future__ import annotations

import collections
import os
from typing import Dict, List, Sequence, Tuple

import numpy as np
import tensorflow as tf
from absl import app, flags, logging
from official.vision.data import tf_example_builder, tfrecord_lib

NUM_CLASSES = 10
SOURCE_SIZE = 8
SOURCE_MAX_VALUE = 16
SPLITS = ("train", "validation")
_IMAGE_FORMATS = ("PNG", "JPEG")


def load_source() -> Tuple[np.ndarray, np.ndarray]:
    """Returns sklearn's digits as `(images, labels)`.

    Returns:
      images: int64 array of shape [1797, 8, 8], values in 0..16.
      labels: int64 array of shape [1797], values in 0..9.
    """
    from sklearn import datasets  # Imported lazily: only needed here.

    digits = datasets.load_digits()
    images = np.rint(digits.images).astype(np.int64)
    labels = np.asarray(digits.target, dtype=np.int64)
    return images, labels


def upscale_digit(image: np.ndarray, image_size: int = 32) -> np.ndarray:
    """Converts one 8x8 digit (0..16) to an RGB uint8 image.

    Args:
      image: array of shape [8, 8] with integer values in 0..16.
      image_size: output height and width, an int >= 8.

    Returns:
      uint8 array of shape [image_size, image_size, 3] (see the module docstring
      for the exact rule).

    Raises:
      ValueError: if `image_size` < 8 or `image` is not an 8x8 array of values in
        0..16.
    """
    _check_image_size(image_size)
    image = np.asarray(image)
    if image.shape != (SOURCE_SIZE, SOURCE_SIZE):
        raise ValueError(f"image must have shape (8, 8), got {image.shape}")
    if image.min() < 0 or image.max() > SOURCE_MAX_VALUE:
        raise ValueError(f"image values must be in 0..16, got range [{image.min()}, {image.max()}]")
    scaled = np.floor(image.astype(np.float64) * 255.0 / SOURCE_MAX_VALUE + 0.5)
    index = (np.arange(image_size) * SOURCE_SIZE) // image_size
    big = scaled[index[:, None], index[None, :]].astype(np.uint8)
    return np.repeat(big[:, :, None], 3, axis=2)


def split_indices(
    labels: np.ndarray, validation_fraction: float = 0.2, seed: int = 0
) -> Dict[str, np.ndarray]:
    """Stratified, seeded train/validation split of example indices.

    Args:
      labels: int array of class labels, one per example.
      validation_fraction: float in (0, 1); the validation split gets
        `ceil(validation_fraction * len(labels))` examples.
      seed: int seed; the same seed always gives the same split.

    Returns:
      `{'train': indices, 'validation': indices}` (int64 arrays, in the shuffled
      order the records are written in; disjoint, together all indices).

    Raises:
      ValueError: if `validation_fraction` is not in (0, 1) or leaves fewer
        examples than classes in either split.
    """
    from sklearn import model_selection  # Imported lazily: only needed here.

    labels = np.asarray(labels)
    num_classes = len(np.unique(labels))
    if not 0.0 < validation_fraction < 1.0:
        raise ValueError(f"validation_fraction must be in (0, 1), got {validation_fraction}")
    num_val = int(np.ceil(validation_fraction * len(labels)))
    if num_val < num_classes or len(labels) - num_val < num_classes:
        raise ValueError(
            f"validation_fraction={validation_fraction} gives {num_val} validation "
            f"and {len(labels) - num_val} train examples; each split needs at "
            f"least {num_classes} (one per class)"
        )
    train, val = model_selection.train_test_split(
        np.arange(len(labels)),
        test_size=validation_fraction,
        random_state=seed,
        shuffle=True,
        stratify=labels,
    )
    return {"train": np.asarray(train, np.int64), "validation": np.asarray(val, np.int64)}


def make_example(
    image: np.ndarray,
    label: int,
    source_index: int,
    image_size: int = 32,
    image_format: str = "PNG",
) -> tf.train.Example:
    """Builds the Model Garden classification `tf.train.Example` of one digit.

    Args:
      image: [8, 8] digit with values 0..16.
      label: class 0..9.
      source_index: row of the digit in `load_digits()`, stored as
        `image/source_id`.
      image_size: output height and width, int >= 8.
      image_format: 'PNG' (lossless) or 'JPEG'.

    Returns:
      A `tf.train.Example` (see the module docstring for its keys).

    Raises:
      ValueError: on a bad `image_size`, `image_format` or image.
    """
    image_format = _check_image_format(image_format)
    pixels = upscale_digit(image, image_size)
    builder = tf_example_builder.TfExampleBuilder()
    builder.add_image_matrix_feature(
        pixels,
        image_format=image_format,
        image_source_id=str(int(source_index)).encode("ascii"),
        label=int(label),
    )
    return builder.example


def shard_paths(output_dir: str, split: str, num_shards: int) -> List[str]:
    """Returns the shard file names Model Garden's `tfrecord_lib` writes."""
    prefix = os.path.join(output_dir, split)
    return [prefix + "-%05d-of-%05d.tfrecord" % (i, num_shards) for i in range(num_shards)]


def write_digits_tfrecords(
    output_dir: str,
    image_size: int = 32,
    num_shards: int = 2,
    seed: int = 0,
    validation_fraction: float = 0.2,
    image_format: str = "PNG",
) -> Dict[str, object]:
    """Writes sklearn's digits as sharded train/validation TFRecords.

    Args:
      output_dir: directory to write into (created if missing). Existing shard
        files with the same names are overwritten.
      image_size: int >= 8, height and width of the stored RGB images
        (default 32, which ResNets accept).
      num_shards: int >= 1, number of files per split; at most the number of
        validation examples (360 at the default fraction).
      seed: int, seed of the stratified split.
      validation_fraction: float in (0, 1), default 0.2 (an 80/20 split:
        1437 train / 360 validation examples).
      image_format: 'PNG' (default, lossless) or 'JPEG'.

    Returns:
      A dict with
        'train_files', 'validation_files': lists of the written shard paths;
        'train_pattern', 'validation_pattern': glob patterns for those files;
        'num_train', 'num_validation': record counts;
        'train_class_counts', 'validation_class_counts': lists of 10 ints;
        'num_classes' (10), 'image_size', 'image_format', 'seed'.

    Raises:
      ValueError: if `image_size` < 8, `num_shards` < 1 or larger than a split,
        `validation_fraction` is out of range, or `image_format` is unknown.
    """
    _check_image_size(image_size)
    image_format = _check_image_format(image_format)
    if not isinstance(num_shards, (int, np.integer)) or num_shards < 1:
        raise ValueError(f"num_shards must be an int >= 1, got {num_shards!r}")
    images, labels = load_source()
    splits = split_indices(labels, validation_fraction, seed)
    smallest = min(len(v) for v in splits.values())
    if num_shards > smallest:
        raise ValueError(
            f"num_shards={num_shards} is larger than the smallest split ({smallest} examples)"
        )
    tfrecord_lib.check_and_make_dir(output_dir)

    def process(index):
        return make_example(images[index], labels[index], index, image_size, image_format), 0

    result: Dict[str, object] = {
        "num_classes": NUM_CLASSES,
        "image_size": int(image_size),
        "image_format": image_format,
        "seed": int(seed),
    }
    for split in SPLITS:
        indices = splits[split]
        # multiple_processes=0: write in this process (the data is tiny).
        tfrecord_lib.write_tf_record_dataset(
            os.path.join(output_dir, split),
            [(int(i),) for i in indices],
            process,
            num_shards,
            multiple_processes=0,
        )
        result[f"{split}_files"] = shard_paths(output_dir, split, num_shards)
        result[f"{split}_pattern"] = os.path.join(
            output_dir, f"{split}-*-of-{num_shards:05d}.tfrecord"
        )
        result[f"num_{split}"] = int(len(indices))
        counts = collections.Counter(labels[indices].tolist())
        result[f"{split}_class_counts"] = [int(counts.get(c, 0)) for c in range(NUM_CLASSES)]
    logging.info(
        "Wrote %d train and %d validation digits to %s",
        result["num_train"],
        result["num_validation"],
        output_dir,
    )
    return result


def _check_image_size(image_size: int) -> None:
    if (
        not isinstance(image_size, (int, np.integer))
        or isinstance(image_size, bool)
        or image_size < SOURCE_SIZE
    ):
        raise ValueError(f"image_size must be an int >= {SOURCE_SIZE}, got {image_size!r}")


def _check_image_format(image_format: str) -> str:
    fmt = str(image_format).upper()
    if fmt == "JPG":
        fmt = "JPEG"
    if fmt not in _IMAGE_FORMATS:
        raise ValueError(f"image_format must be one of {_IMAGE_FORMATS}, got {image_format!r}")
    return fmt


def _define_flags() -> None:
    flags.DEFINE_string("output_dir", None, "Directory for the TFRecord shards.")
    flags.DEFINE_integer("image_size", 32, "Output image height/width (>= 8).")
    flags.DEFINE_integer("num_shards", 2, "Number of shards per split.")
    flags.DEFINE_integer("seed", 0, "Seed of the stratified split.")
    flags.DEFINE_float("validation_fraction", 0.2, "Fraction of examples in the validation split.")
    flags.DEFINE_enum("image_format", "PNG", list(_IMAGE_FORMATS), "Encoding of image/encoded.")
    flags.mark_flag_as_required("output_dir")


def main(argv: Sequence[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    fl = flags.FLAGS
    result = write_digits_tfrecords(
        fl.output_dir,
        image_size=fl.image_size,
        num_shards=fl.num_shards,
        seed=fl.seed,
        validation_fraction=fl.validation_fraction,
        image_format=fl.image_format,
    )
    for key in sorted(result):
        print(f"{key}: {result[key]}")


if __name__ == "__main__":
    _define_flags()
    app.run(main)
