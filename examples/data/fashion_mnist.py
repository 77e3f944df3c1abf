"""Fashion-MNIST from local IDX files (Debian's ``dataset-fashion-mnist``), checked and split.

The 70,000 real 28x28 grayscale images of Zalando's Fashion-MNIST (10 classes, MIT licence),
as the four gzipped IDX files that Debian's package ``dataset-fashion-mnist`` installs under
``/usr/share/datasets/fashion-mnist/`` (``apt-get install dataset-fashion-mnist``). Nothing is
downloaded: any directory holding the same four files works (``data_dir``). Each file's
sha256 is checked against the published release, so a truncated or different copy fails
loudly instead of training on wrong data.

IDX format (LeCun et al.): a big-endian header ``0x0000``, a type code (``0x08`` = uint8),
the number of dimensions, one uint32 per dimension, then the data in C order.

Split (the evidence protocols in ``studies/evidence/``): the 60,000 training images are
split, stratified by class with a fixed seed, into 55,000 train and 5,000 validation images;
the 10,000 test images are only for final numbers.
"""

import gzip
import os
import struct
from typing import Dict, NamedTuple

import numpy as np

from data_checksums import sha256_file

__all__ = ["DEFAULT_DIR", "FILES", "FashionMNIST", "load", "read_idx"]

#: Where Debian's ``dataset-fashion-mnist`` package puts the files.
DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"

#: file name -> sha256 of the gzipped file (the upstream release, as Debian ships it).
FILES: Dict[str, str] = {
    "train-images-idx3-ubyte.gz": "b0564c3eedabfbf835052cff8503ea422014ce006caf5b757f851416ee8300c7",
    "train-labels-idx1-ubyte.gz": "0ae29f65d86684f32d1b9c85147786c547b9c6aebcaf235f0400a0cce308b056",
    "t10k-images-idx3-ubyte.gz": "cc1d090a38ace84dfa1aa66e3ada7c336ef481a96936906477e6dd344da56eaa",
    "t10k-labels-idx1-ubyte.gz": "8d3605d196f4be44669e46906da9733c8131fef761fdbfec72c424d5222f1a05",
}

_HOW_TO_GET = (
    "Install Debian's package (`apt-get install dataset-fashion-mnist`, which puts "
    f"the files in {DEFAULT_DIR}), or pass the directory of a copy of the four "
    "files (" + ", ".join(sorted(FILES)) + ")."
)


class FashionMNIST(NamedTuple):
    """The split. Images float32 ``[n, 28, 28, 1]`` in [0, 1]; labels int32 ``[n]`` in 0..9."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def read_idx(path: str) -> np.ndarray:
    """Reads one (optionally gzipped) IDX file of uint8 data.

    Args:
      path: str, the file; gzipped if it ends with ``.gz``.

    Returns:
      uint8 array of the shape in the header.

    Raises:
      ValueError: not an IDX file of uint8 data, or the data is shorter or longer than the
        header says.
    """
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0:2] != b"\x00\x00":
        raise ValueError(f"{path}: not an IDX file (bad magic number).")
    if raw[2] != 0x08:
        raise ValueError(f"{path}: IDX type code {raw[2]:#04x}; only uint8 (0x08) is read.")
    ndim = raw[3]
    header = 4 + 4 * ndim
    shape = struct.unpack(">" + "I" * ndim, raw[4:header])
    expected = int(np.prod(shape)) if ndim else 1
    if len(raw) - header != expected:
        raise ValueError(
            f"{path}: the header says {expected} bytes of data for shape "
            f"{shape}, the file has {len(raw) - header}."
        )
    return np.frombuffer(raw, np.uint8, offset=header).reshape(shape)


def load(
    data_dir: str = DEFAULT_DIR,
    *,
    val_size: int = 5000,
    split_seed: int = 0,
    check_sha256: bool = True,
    files: Dict[str, str] = None,
) -> FashionMNIST:
    """Loads, checks and splits Fashion-MNIST.

    Args:
      data_dir: str, the directory with the four ``*-ubyte.gz`` files.
      val_size: int in [10, 59990], validation images taken from the 60,000 training ones,
        stratified by class. Default 5000 (55k train / 5k validation).
      split_seed: int, the seed of the stratified split (same split every run).
      check_sha256: bool; verify each file's sha256 against :data:`FILES`.
      files: None, or ``{name: sha256}`` to check instead of :data:`FILES` (tests).

    Returns:
      A :class:`FashionMNIST`.

    Raises:
      FileNotFoundError: a file is missing (the message says how to get the data).
      ValueError: a checksum differs, a file is not valid IDX, counts do not match, or
        ``val_size`` is out of range.
    """
    files = FILES if files is None else files
    paths = {name: os.path.join(data_dir, name) for name in files}
    missing = [p for p in paths.values() if not os.path.isfile(p)]
    if missing:
        raise FileNotFoundError(
            f"Fashion-MNIST files not found: {', '.join(missing)}. " + _HOW_TO_GET
        )
    if check_sha256:
        for name, path in paths.items():
            got = sha256_file(path)
            if got != files[name]:
                raise ValueError(
                    f"{path}: sha256 {got} is not the published {files[name]}; "
                    "the copy is damaged or another data set. " + _HOW_TO_GET
                )
    x_all = read_idx(paths["train-images-idx3-ubyte.gz"])
    y_all = read_idx(paths["train-labels-idx1-ubyte.gz"]).astype(np.int32)
    x_test = read_idx(paths["t10k-images-idx3-ubyte.gz"])
    y_test = read_idx(paths["t10k-labels-idx1-ubyte.gz"]).astype(np.int32)
    for x, y, part in ((x_all, y_all, "train"), (x_test, y_test, "t10k")):
        if x.ndim != 3 or x.shape[0] != y.shape[0]:
            raise ValueError(
                f"{part}: {x.shape[0]} images of shape {x.shape[1:]} but {y.shape[0]} labels."
            )
    n = x_all.shape[0]
    if not 10 <= val_size <= n - 10:
        raise ValueError(f"`val_size` must be in [10, {n - 10}]; got {val_size}.")
    val = _stratified_indices(y_all, val_size, split_seed)
    train = np.setdiff1d(np.arange(n), val)

    def images(x):
        return (x.astype(np.float32) / 255.0)[..., None]

    return FashionMNIST(
        images(x_all[train]), y_all[train], images(x_all[val]), y_all[val], images(x_test), y_test
    )


def _stratified_indices(labels: np.ndarray, size: int, seed: int) -> np.ndarray:
    """``size`` sorted indices with each class in proportion to ``labels`` (seeded)."""
    from sklearn.model_selection import train_test_split  # pylint: disable=import-outside-toplevel

    _, chosen = train_test_split(
        np.arange(labels.shape[0]), test_size=size, stratify=labels, random_state=seed
    )
    return np.sort(chosen)
