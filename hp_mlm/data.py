"""Rows of text: load a corpus (Hub id or local path), clean it, hold out validation rows, find its names.

Taught in ``notebooks/01_tokenising.ipynb``. Loading goes through ``datasets``; split strings such
as ``train[:10%]`` are parsed here and counted as ``datasets`` counts them (a percentage to the
nearest row, exact halves to the even row), the same way for Hub and local data. The names of people, places and things in a corpus (for entity masking and
per-kind metrics, notebook 05) are found offline from capitalisation (:func:`find_entities`); notebook
05 names the alternative, a spaCy model (``studies.entities.find_entities_spacy``).
"""

from __future__ import annotations

import codecs
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import torch
from datasets import Dataset, DatasetDict, load_dataset, load_from_disk

from .common import error_summary
from .hub import cache_error, dataset_from_cache, dataset_in_cache, datasets_cache_dir, hub_error, is_local, require_hub
from .profiles import PACKAGE_DATASETS

# ---------------------------------------------------------------------------------------------
# Loading rows: Hub id or local path, split slices, cleaning, the held-out split
# ---------------------------------------------------------------------------------------------


#: Local file types we read, and the ``datasets`` builder for each.
BUILDERS = {".txt": "text", ".csv": "csv", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}
ACCEPTED = "a .txt (paragraphs), .csv, .json, .jsonl or .parquet file, a folder of those, or a save_to_disk folder"
#: A block of lines between blank lines whose lines are all at most this long is one paragraph wrapped into lines
#: (Project Gutenberg wraps at about 70 characters); a longer line is a paragraph of its own.
WRAPPED = 100
#: Words in a row of a learner's .txt per token of ``max_length``: English prose is about 1.3 WordPiece tokens a
#: word in bert-base-uncased's vocabulary, so a row of consecutive paragraphs stays near ``max_length`` tokens.
WORDS_PER_TOKEN = 0.7

#: What a .txt is read in, and how to save one that is not (``text_encoding``).
SAVE_AS_TEXT = "the course reads .txt in UTF-8, UTF-16 or Windows cp1252: save yours as plain text (.txt), UTF-8"
_NOT_TEXT = re.compile("[\x00-\x08\x0e-\x1f\x7f\ufffd]")  # control characters, or bytes that did not decode
_SPLIT_RE = re.compile(r"^\s*(?P<name>[\w.-]+)\s*(?:\[(?P<start>[^:\]]*):(?P<stop>[^\]]*)\])?\s*$")


@dataclass(frozen=True)
class CorpusReport:
    """What loading found. ``n_rows`` = ``n_loaded`` - ``n_dropped``.

    Attributes:
        source: the id or path loaded.
        split: the split string applied.
        n_loaded: rows in the slice before cleaning.
        n_dropped: rows dropped because their text was empty, whitespace-only or missing (None).
        n_rows: rows kept.
        n_available: rows in the whole split before slicing (``n_loaded`` of them were kept by the slice).
        encoding: the encoding a ``.txt`` was read in (:func:`text_encoding`), else ``""``.
    """

    source: str
    split: str
    n_loaded: int
    n_dropped: int
    n_rows: int
    n_available: int = 0
    encoding: str = ""


def parse_split(split: str) -> tuple[str, str | None, str | None]:
    """Split ``"train[:10%]"`` into ``("train", "", "10%")``; ``"train"`` into ``("train", None, None)``.

    Raises:
        ValueError: for a string that is not ``name`` or ``name[start:stop]``.
    """
    m = _SPLIT_RE.match(split)
    if not m:
        raise ValueError(f"split {split!r} is not of the form 'train', 'train[:10%]', 'train[-10%:]' or 'train[:200]'")
    if m.group("start") is None:
        return m.group("name"), None, None
    return m.group("name"), m.group("start").strip(), m.group("stop").strip()


def _bound(text: str | None, n: int, split: str) -> int | None:
    """One slice bound as a row index: ``None`` or ``""`` -> None, ``"10%"`` -> ``int(round(10 * n / 100))``
    (as ``datasets.arrow_reader._pct_to_abs_closest``: Python's ``round``, exact halves to the even
    row, so 10% of 25 rows is 2 and of 45 rows 4), ``"-3"`` -> n - 3."""
    if not text:
        return None
    try:
        if text.endswith("%"):
            value = float(text[:-1])
            rows = int(round(abs(value) * n / 100))  # datasets rounds the signed value: the same, halves to even
            return n - rows if value < 0 or text.startswith("-") else rows
        value_int = int(text)
    except ValueError:
        raise ValueError(f"slice bound {text!r} in split {split!r} is not an integer or a percentage") from None
    return n + value_int if value_int < 0 else value_int


def slice_indices(split: str, n_rows: int) -> range:
    """Row indices that ``split``'s slice selects from a split of ``n_rows`` rows.

    The rows ``datasets.load_dataset(..., split=split)`` gives for the same string: a percentage
    becomes the nearest whole row with Python's ``round`` (exact halves to the even row: ``train[:10%]``
    of 25 rows is 2 rows, of 45 rows 4, ``train[10%:20%]`` of 25 rows is rows 2-4) *before* a negative
    bound is taken from the end, so ``train[-10%:]`` of 30 rows is the last 3 rows. Where ``datasets``
    gives nothing (``train[:10%]`` of 5 rows) this refuses too; ``train[-1%:]`` of 30 rows is refused
    as empty, where ``datasets`` reads -0 as the start and returns the whole split.

    Raises:
        ValueError: the slice selects no rows (one line: what to ask for instead).
    """
    _, start, stop = parse_split(split)
    selected = range(n_rows)[_bound(start, n_rows, split) : _bound(stop, n_rows, split)]
    if len(selected) == 0:
        raise ValueError(
            f"split {split!r} selects no rows of the {n_rows} available (a percentage is rounded to whole rows "
            "as datasets rounds it, halves to even: 10% of 5 rows is none); ask for a larger slice or a number "
            "of rows, e.g. 'train[:2]'"
        )
    return selected


def text_encoding(files: Sequence[str]) -> str:
    """The encoding the ``.txt`` ``files`` are read in: ``"utf-16"`` after a UTF-16 byte-order mark (BOM), else
    ``"utf-8-sig"`` (UTF-8; a BOM, as Windows editors write, is dropped) where the bytes decode as UTF-8, else
    ``"cp1252"`` (Windows' "ANSI", Notepad's and Word's) where they decode to text without control characters.

    Raises:
        ValueError: a file in none of these (a binary file, UTF-16 without a BOM), or files of different
            encodings; one line on what the course reads and how to save the file.
    """
    found = set()
    for name in files:
        raw = Path(name).read_bytes()
        utf16 = ["utf-16"] if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) else []
        readable = utf16 or [e for e in ("utf-8-sig", "cp1252") if not _NOT_TEXT.search(raw.decode(e, "replace"))]
        if not readable:
            raise ValueError(f"Cannot read {name!r} as text: {SAVE_AS_TEXT}")
        found.add(readable[0])
    if len(found) > 1:
        raise ValueError(f"The .txt files {list(files)} are in different encodings ({sorted(found)}); {SAVE_AS_TEXT}")
    return found.pop()


def paragraphs(text: str) -> list[str]:
    """A text's paragraphs, whitespace collapsed, blank lines never one: in a text with blank lines, a block between
    them is one paragraph where every line of it is at most :data:`WRAPPED` characters (a paragraph wrapped into
    lines, as Project Gutenberg's); else each line is one (a paragraph a line, with or without blank lines between)."""
    found, blocks = [], re.split(r"\n\s*\n", text)
    for block in blocks:
        lines = [" ".join(line.split()) for line in block.splitlines() if line.strip()]
        found += [" ".join(lines)] if len(blocks) > 1 < len(lines) and max(map(len, lines)) <= WRAPPED else lines
    return found


def paragraph_rows(texts: Sequence[str], max_length: int) -> list[str]:
    """Consecutive paragraphs joined into rows of at most ``WORDS_PER_TOKEN * max_length`` words (about
    ``max_length`` tokens), as the Oz table is built; a longer paragraph is a row of its own (``prepare`` cuts it
    at word starts), with what came before it where that is under a quarter of a row (a chapter's heading). A learner's .txt is read this way everywhere: the command line, the notebooks, the handout."""
    rows, words = [[]], WORDS_PER_TOKEN * max_length
    for text in texts:
        held = sum(len(t.split()) for t in rows[-1])  # a row of a heading or two (under a quarter) takes the next too
        if held >= words / 4 and held + len(text.split()) > words:
            rows.append([])
        rows[-1].append(text)
    return [" ".join(row) for row in rows if row]


def _local_files(path: Path) -> tuple[str, list[str]]:
    """The ``datasets`` builder and the files for a local file or folder."""
    if path.is_file():
        builder = BUILDERS.get(path.suffix.lower())
        if builder is None:  # a .docx or .pdf too: the course reads text
            raise ValueError(
                f"Cannot read {str(path)!r}: unsupported file type {path.suffix!r}. Pass {ACCEPTED}; {SAVE_AS_TEXT}"
            )
        return builder, [str(path)]
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in BUILDERS)
    builders = {BUILDERS[p.suffix.lower()] for p in files}
    if not files:
        raise ValueError(f"Folder {str(path)!r} holds no data files. Pass {ACCEPTED}.")
    if len(builders) > 1:
        raise ValueError(
            f"Folder {str(path)!r} mixes file types {sorted({p.suffix for p in files})}; keep one type per folder."
        )
    return builders.pop(), [str(p) for p in files]


def _load_split(source: str, split_name: str, max_length: int) -> tuple[Dataset, str]:
    """Load one whole split of a Hub dataset, a local file/folder, or the smoke corpus, and the encoding its
    ``.txt`` files were read in (:func:`text_encoding`; ``""`` for other data): their rows are
    :func:`paragraph_rows` of ``max_length``.

    A Hub id comes from the Hub, or, in offline mode or with the Hub out of reach, from the
    ``datasets`` cache (:func:`hub.require_hub` decides within seconds).
    """
    if source.startswith("hp_mlm:") and source not in PACKAGE_DATASETS:
        raise ValueError(f"{source!r} is not a corpus of the package; it ships {sorted(PACKAGE_DATASETS)}")
    if source in PACKAGE_DATASETS:
        path = resources.files("hp_mlm") / "corpora" / PACKAGE_DATASETS[source]
        return load_dataset("text", data_files={split_name: str(path)}, split=split_name), ""
    if is_local(source):
        path = Path(source).expanduser()
        if not path.exists():
            raise FileNotFoundError(f"Dataset path {source!r} does not exist. Pass {ACCEPTED}, or a Hub dataset id.")
        if path.is_dir() and ((path / "dataset_info.json").exists() or (path / "dataset_dict.json").exists()):
            loaded = load_from_disk(str(path))
            if isinstance(loaded, DatasetDict):
                if split_name not in loaded:
                    raise ValueError(f"{source!r} has splits {list(loaded)}, not {split_name!r}")
                return loaded[split_name], ""
            return loaded, ""
        if split_name != "train":  # data files hold one split, which datasets calls "train"
            raise ValueError(
                f"{source!r} is a data file or folder, whose one split is 'train', not {split_name!r}; "
                "set `split` to e.g. train or 'train[:10%]'"
            )
        builder, files = _local_files(path)
        if all(Path(f).stat().st_size == 0 for f in files):
            raise ValueError(f"{source!r} is empty: there is no text to train on. Pass {ACCEPTED}.")
        if builder == "text":  # paragraphs, wherever the blank lines are; files in order
            encoding = text_encoding(files)
            texts = [p for name in files for p in paragraphs(Path(name).read_text(encoding))]
            return Dataset.from_dict({"text": paragraph_rows(texts, max_length)}), encoding
        try:  # csv and json: UTF-8
            return load_dataset(builder, data_files={split_name: files}, split=split_name), ""
        except Exception as error:  # noqa: BLE001 - a malformed file, whatever the builder's error type
            raise ValueError(
                f"Cannot read {source!r} as {builder} ({error_summary(error)}). Pass {ACCEPTED}."
            ) from error
    # Offline mode or a Hub out of reach: datasets' own cache only (as load_dataset does offline).
    cache_only = require_hub(source, "dataset", lambda: dataset_in_cache(source), datasets_cache_dir())
    try:
        return (dataset_from_cache(source, split_name) if cache_only else load_dataset(source, split=split_name)), ""
    except (ConnectionError, OSError) as error:
        raise (cache_error if cache_only else hub_error)(source, "dataset", error) from error


def check_text_column(rows: Dataset, text_column: str) -> None:
    """Raise ValueError, naming the columns present and the flag to use, if ``text_column`` is not one of them."""
    if text_column not in rows.column_names:
        raise ValueError(
            f"text column {text_column!r} not found; the data has columns {rows.column_names}. "
            "Set text_column (HP_MLM_TEXT_COLUMN) to the right one."
        )


def drop_empty_rows(rows: Dataset, text_column: str) -> tuple[Dataset, int]:
    """Drop rows whose text is None, empty or whitespace-only.

    Returns:
        ``(kept rows, number dropped)``; kept rows stay in their original order.
    Raises:
        ValueError: if ``text_column`` is missing (names the columns present).
    """
    check_text_column(rows, text_column)
    texts = rows[text_column]
    keep = [i for i, t in enumerate(texts) if isinstance(t, str) and t.strip()]
    return (rows if len(keep) == len(texts) else rows.select(keep)), len(texts) - len(keep)


def load_corpus(
    source: str, split: str = "train", text_column: str = "text", max_length: int = 128
) -> tuple[Dataset, CorpusReport]:
    """Load, slice and clean a corpus. The result has one column, ``text_column``.

    Args:
        source: a Hub dataset id (``andjela-r/mlm-harry-potter``), a local path (see ``ACCEPTED``),
            or a corpus shipped with the package (``profiles.PACKAGE_DATASETS``: the smoke corpus,
            ``hp_mlm:products``). A ``.txt`` file (a paragraph a line, or paragraphs between blank lines) is
            rows of consecutive paragraphs (:func:`paragraph_rows`), in column ``text``, read in UTF-8,
            UTF-16 or Windows cp1252 (:func:`text_encoding`; ``report.encoding`` says which).
        split: split and optional slice: ``train``, ``train[:10%]``, ``train[-10%:]``, ``train[:200]``.
        text_column: the column holding the text.
        max_length: the run's tokens per row (``Settings.max_length``), which a .txt's rows are sized to.
    Returns:
        ``(rows, report)``.
    Raises:
        FileNotFoundError: a local path that does not exist.
        ValueError: an unsupported file type (or a ``.txt`` in none of those encodings), a missing text column (names the columns present),
            a slice that selects nothing, or no usable (non-empty) rows.
        HubUnavailableError: a Hub id that cannot be fetched (names the id; says to pass a local path).
    """
    split_name, _, _ = parse_split(split)
    full, encoding = _load_split(source, split_name, max_length)
    if text_column not in full.column_names and full.column_names == ["text"] and source.endswith(".txt"):
        text_column = "text"
    check_text_column(full, text_column)  # the column before the slice: the order a user fixes them in
    indices = slice_indices(split, len(full))
    rows = full if len(indices) == len(full) else full.select(indices)
    rows, n_dropped = drop_empty_rows(rows, text_column)
    if len(rows) == 0:
        raise ValueError(
            f"{source!r} ({split}) has no usable rows: all {n_dropped} rows are empty, whitespace-only or missing."
        )
    extra = [c for c in rows.column_names if c != text_column]
    if extra:
        rows = rows.remove_columns(extra)
    return rows, CorpusReport(source, split, len(indices), n_dropped, len(rows), len(full), encoding)


def train_validation_split(
    rows: Dataset, validation_fraction: float, seed: int, max_validation_rows: int = 0, text_column: str = "text"
) -> tuple[Dataset, Dataset]:
    """Hold out ``validation_fraction`` of the rows, chosen at random with ``seed``.

    The held-out rows never reach training, nor does their text: a row a book repeats (*"Come in," said Oz.*)
    drawn into both parts stays in training only. Rows keep their corpus order within each part.

    Args:
        validation_fraction: fraction in [0, 1); a positive fraction holds out at least 1 row.
        max_validation_rows: cap on held-out rows (0 = no cap); rows over the cap go to training.
        text_column: the column whose text a held-out row must not share with a training row.
    Returns:
        ``(train_rows, validation_rows)``; ``validation_rows`` is empty when the fraction is 0.
    Raises:
        ValueError: if the fraction is out of range, or no training row would remain.
    """
    if not 0.0 <= validation_fraction < 1.0:
        raise ValueError(f"validation_fraction must be in [0, 1), got {validation_fraction}")
    n = len(rows)
    n_val = 0 if validation_fraction == 0 else max(1, int(math.floor(n * validation_fraction + 0.5)))
    if max_validation_rows:
        n_val = min(n_val, max_validation_rows)
    if n - n_val < 1:
        raise ValueError(f"{n} rows leave no training row after holding out {n_val} for validation")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    val_idx = sorted(order[:n_val])
    held = set(val_idx)
    train_idx = [i for i in range(n) if i not in held]
    texts = rows[text_column]
    trained = {texts[i] for i in train_idx}
    return rows.select(train_idx), rows.select([i for i in val_idx if texts[i] not in trained])


# ---------------------------------------------------------------------------------------------
# Names in a corpus, for entity masking and per-kind scores (notebook 05)
# ---------------------------------------------------------------------------------------------


def find_entities(texts: Sequence[str], min_count: int = 3, capitalised_share: float = 0.9) -> list[str]:
    """Names of people, places and things in a corpus, found offline from capitalisation.

    A word counts as an entity when it appears at least ``min_count`` times capitalised *not* at
    the start of a sentence, and is capitalised in at least ``capitalised_share`` of all its
    appearances (so "The" or "But" never qualify, "Dorothy" and "Emerald" do).

    Words are runs of letters (BERT's pre-tokenizer splits at apostrophes and hyphens); "I" and
    one-letter words never count.

    Returns:
        Lower-cased entity words, most frequent first.
    """
    word = re.compile(r"[^\W\d_]+")  # letters only: BERT's pre-tokenizer splits at ' and -
    inside, total, capital = Counter(), Counter(), Counter()
    for text in texts:
        for m in word.finditer(text or ""):
            token = m.group()
            key = token.lower()
            total[key] += 1
            if token[0].isupper():
                capital[key] += 1
                before = text[: m.start()].rstrip()
                sentence_start = not before or before[-1] in ".!?\"“”'‘’:;(—-"
                if not sentence_start:
                    inside[key] += 1
    found = [
        k for k, n in inside.items() if n >= min_count and capital[k] >= capitalised_share * total[k] and len(k) > 1
    ]
    return sorted(found, key=lambda k: (-inside[k], k))
