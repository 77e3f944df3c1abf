"""Fashion-MNIST IDX reader: checksums, split, errors (on small IDX files made here, and on
the real files when Debian's dataset-fashion-mnist is installed)."""

import gzip
import hashlib
import os
import struct
import tempfile

import numpy as np
import tensorflow as tf

import fashion_mnist as fm


def write_idx(path, array):
    """Writes uint8 ``array`` as a gzipped IDX file; returns its sha256."""
    header = (
        b"\x00\x00\x08" + bytes([array.ndim]) + struct.pack(">" + "I" * array.ndim, *array.shape)
    )
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def synthetic_dir(n_train=100, n_test=20):
    """Four IDX files: image i is filled with the value i % 256, label i % 10."""
    d = tempfile.mkdtemp()
    arrays = {
        "train-images-idx3-ubyte.gz": np.stack(
            [np.full((28, 28), i % 256) for i in range(n_train)]
        ),
        "train-labels-idx1-ubyte.gz": np.arange(n_train) % 10,
        "t10k-images-idx3-ubyte.gz": np.stack([np.full((28, 28), 255 - i) for i in range(n_test)]),
        "t10k-labels-idx1-ubyte.gz": np.arange(n_test) % 10,
    }
    shas = {name: write_idx(os.path.join(d, name), a) for name, a in arrays.items()}
    return d, shas


class FashionMNISTTest(tf.test.TestCase):
    def test_split_is_stratified_seeded_and_scaled(self):
        d, shas = synthetic_dir()
        data = fm.load(d, val_size=20, files=shas)
        self.assertEqual(data.x_train.shape, (80, 28, 28, 1))
        self.assertEqual(data.x_val.shape, (20, 28, 28, 1))
        self.assertEqual(data.x_test.shape, (20, 28, 28, 1))
        self.assertEqual(data.x_train.dtype, np.float32)
        np.testing.assert_array_equal(np.bincount(data.y_val, minlength=10), [2] * 10)
        # image i is the constant i/255 with label i % 10: pixels and labels stay paired
        idx = np.round(data.x_train[:, 0, 0, 0] * 255).astype(int)
        np.testing.assert_array_equal(idx % 10, data.y_train)
        self.assertEqual(len(set(idx) | set(np.round(data.x_val[:, 0, 0, 0] * 255))), 100)
        self.assertAllClose(data.x_test[3, 5, 5, 0], 252 / 255)
        again = fm.load(d, val_size=20, files=shas)
        np.testing.assert_array_equal(again.y_val, data.y_val)
        other = fm.load(d, val_size=20, split_seed=1, files=shas)
        self.assertFalse(np.array_equal(other.x_val, data.x_val))

    def test_missing_files_say_how_to_get_them(self):
        with self.assertRaisesRegex(FileNotFoundError, "apt-get install dataset-fashion-mnist"):
            fm.load(tempfile.mkdtemp())

    def test_wrong_checksum_is_refused(self):
        d, shas = synthetic_dir()
        shas["t10k-labels-idx1-ubyte.gz"] = "0" * 64
        with self.assertRaisesRegex(ValueError, "sha256"):
            fm.load(d, val_size=20, files=shas)

    def test_bad_idx_files_are_refused(self):
        d = tempfile.mkdtemp()
        path = os.path.join(d, "x.gz")
        with gzip.open(path, "wb") as f:
            f.write(b"\x00\x00\x08\x01" + struct.pack(">I", 5) + b"\x01\x02")
        with self.assertRaisesRegex(ValueError, "header says 5 bytes"):
            fm.read_idx(path)
        with gzip.open(path, "wb") as f:
            f.write(b"\x01\x00\x08\x01")
        with self.assertRaisesRegex(ValueError, "magic"):
            fm.read_idx(path)
        d2, shas = synthetic_dir()
        with self.assertRaisesRegex(ValueError, "val_size"):
            fm.load(d2, val_size=0, files=shas)

    def test_real_files_when_installed(self):
        if not all(os.path.isfile(os.path.join(fm.DEFAULT_DIR, n)) for n in fm.FILES):
            self.skipTest("Debian's dataset-fashion-mnist is not installed")
        data = fm.load()
        self.assertEqual(
            [len(data.y_train), len(data.y_val), len(data.y_test)], [55000, 5000, 10000]
        )
        np.testing.assert_array_equal(np.bincount(data.y_val), [500] * 10)
        np.testing.assert_array_equal(np.bincount(data.y_test), [1000] * 10)
        self.assertBetween(float(data.x_train.mean()), 0.2, 0.4)


if __name__ == "__main__":
    tf.test.main()
