import codecs
import json
import time
from pathlib import Path

import pandas as pd
import pytest
from datasets import Dataset, DatasetDict
from helpers import SENTENCES

from hp_mlm.data import load_corpus, slice_indices, train_validation_split
from hp_mlm.hub import HubUnavailableError


def write_all_formats(folder, texts):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rows.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    pd.DataFrame({"text": texts, "n": range(len(texts))}).to_csv(folder / "rows.csv", index=False)
    (folder / "rows.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    pd.DataFrame({"text": texts}).to_parquet(folder / "rows.parquet")
    return folder


@pytest.mark.parametrize("name", ["rows.txt", "rows.csv", "rows.jsonl", "rows.parquet"])
def test_local_files_load_in_order_with_one_text_column(tmp_path, name):
    write_all_formats(tmp_path, SENTENCES)
    # a .txt is paragraphs joined into rows of about max_length tokens: at 8 tokens each sentence is a row of its own
    rows, report = load_corpus(str(tmp_path / name), "train", "text", max_length=8)
    assert rows["text"] == SENTENCES
    assert rows.column_names == ["text"]
    assert (report.n_loaded, report.n_dropped, report.n_rows) == (8, 0, 8)


def test_folder_of_files_and_save_to_disk_folder(tmp_path):
    folder = tmp_path / "parts"
    folder.mkdir()
    for i in range(2):
        pd.DataFrame({"text": SENTENCES[4 * i : 4 * i + 4]}).to_parquet(folder / f"part{i}.parquet")
    rows, _ = load_corpus(str(folder), "train")
    assert sorted(rows["text"]) == sorted(SENTENCES)
    DatasetDict({"train": Dataset.from_dict({"text": SENTENCES})}).save_to_disk(str(tmp_path / "saved"))
    rows, _ = load_corpus(str(tmp_path / "saved"), "train[:2]")
    assert rows["text"] == SENTENCES[:2]


def test_empty_whitespace_and_none_rows_are_dropped_and_counted(tmp_path):
    texts = ["Harry smiled.", "", "   \n\t", None, "Ron laughed."]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    rows, report = load_corpus(str(path), "train")
    assert rows["text"] == ["Harry smiled.", "Ron laughed."]
    assert report.n_dropped == 3 and report.n_rows == 2


def test_a_corpus_with_no_usable_rows_is_refused(tmp_path):
    path = tmp_path / "blank.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in ["", "  ", None]), encoding="utf-8")
    with pytest.raises(ValueError, match="no usable rows"):
        load_corpus(str(path), "train")


def test_missing_text_column_names_asked_and_present_columns(tmp_path):
    pd.DataFrame({"body": ["a b c"], "page": [1]}).to_parquet(tmp_path / "x.parquet")
    with pytest.raises(ValueError, match=r"'content'.*\['body', 'page'\]"):
        load_corpus(str(tmp_path / "x.parquet"), "train", "content")


def test_missing_path_and_unsupported_type_name_the_path_and_accepted_types(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing-here.parquet"):
        load_corpus(str(tmp_path / "nothing-here.parquet"))
    bad = tmp_path / "book.pdf"
    bad.write_bytes(b"%PDF")
    with pytest.raises(ValueError, match=r"book\.pdf.*\.txt.*\.csv.*\.jsonl.*\.parquet"):
        load_corpus(str(bad))


@pytest.mark.parametrize(
    "split, expected",
    [
        ("train[:10%]", range(0, 3)),
        ("train[-10%:]", range(27, 30)),
        ("train[:200]", range(0, 30)),
        ("train[5:8]", range(5, 8)),
        ("train[-4:]", range(26, 30)),
        ("train", range(0, 30)),
    ],
)
def test_slices_give_exact_rows(tmp_path, split, expected):
    texts = [f"row number {i} of the tale" for i in range(30)]
    (tmp_path / "t.txt").write_text("\n".join(texts), encoding="utf-8")
    rows, _ = load_corpus(str(tmp_path / "t.txt"), split, max_length=8)  # a paragraph a row: see above
    assert rows["text"] == [texts[i] for i in expected]


@pytest.mark.parametrize("split", ["train[:0.5%]", "train[-1%:]", "train[30:]"])
def test_slice_that_selects_nothing_is_refused_never_the_whole_split(split):
    with pytest.raises(ValueError, match="selects no rows"):
        slice_indices(split, 30)


#: Percent slices at exact halves, and what ``datasets`` 5.2 gives for them (its
#: ``arrow_reader._pct_to_abs_closest`` is ``int(round(pct * n / 100))``: a half goes to the even row).
HALVES = [
    ("train[:10%]", 25, range(0, 2)),  # 2.5 rows -> 2 (half up would give 3)
    ("train[:10%]", 45, range(0, 4)),  # 4.5 -> 4 (half up: 5)
    ("train[10%:20%]", 25, range(2, 5)),  # 2.5 -> 2 and 5.0 -> 5: rows 2-4 (half up: rows 3-4)
    ("train[:50%]", 5, range(0, 2)),  # 2.5 -> 2 (half up: 3)
    ("train[-10%:]", 25, range(23, 25)),  # -2.5 -> -2: the last 2 rows
]


@pytest.mark.parametrize("split, n_rows, expected", HALVES)
def test_percent_slices_send_exact_halves_to_the_even_row_as_datasets_does(split, n_rows, expected):
    assert slice_indices(split, n_rows) == expected


def test_a_percent_slice_rounded_to_no_row_is_refused_in_one_line_saying_what_to_ask():
    """10% of 5 rows is half a row, which rounds to none (``datasets`` raises "corresponds to no data")."""
    with pytest.raises(ValueError) as caught:
        slice_indices("train[:10%]", 5)
    message = str(caught.value)
    assert "\n" not in message and "selects no rows of the 5 available" in message and "'train[:2]'" in message


@pytest.mark.parametrize("split, n_rows, expected", [*HALVES, ("train[:10%]", 5, None)])
def test_slices_select_the_rows_load_dataset_selects_for_the_same_string(tmp_path, split, n_rows, expected):
    """The installed ``datasets`` on a text file of ``n_rows`` lines, against ``load_corpus`` on the same rows
    saved with ``save_to_disk`` and on the text file itself."""
    from datasets import load_dataset

    texts = [str(i) for i in range(n_rows)]
    (tmp_path / "rows.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    Dataset.from_dict({"text": texts}).save_to_disk(str(tmp_path / "saved"))
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))  # a row a line

    def theirs():
        files = {"train": str(tmp_path / "rows.txt")}
        return load_dataset("text", data_files=files, split=split, cache_dir=str(tmp_path / "cache"))["text"]

    if expected is None:
        with pytest.raises(ValueError, match="corresponds to no data"):
            theirs()
        for source in ("saved", "rows.jsonl"):
            with pytest.raises(ValueError, match="selects no rows"):
                load_corpus(str(tmp_path / source), split)
        return
    assert theirs() == [texts[i] for i in expected]
    for source in ("saved", "rows.jsonl"):
        assert load_corpus(str(tmp_path / source), split)[0]["text"] == [texts[i] for i in expected]


def test_malformed_split_is_refused():
    with pytest.raises(ValueError, match="not of the form"):
        slice_indices("train[:10%", 30)


def test_validation_rows_are_held_out_seeded_and_disjoint():
    rows = Dataset.from_dict({"text": [f"sentence {i}" for i in range(50)]})
    train, val = train_validation_split(rows, 0.2, seed=7)
    train2, val2 = train_validation_split(rows, 0.2, seed=7)
    _, val3 = train_validation_split(rows, 0.2, seed=8)
    assert len(val) == 10 and len(train) == 40
    assert not set(train["text"]) & set(val["text"])
    assert val["text"] == val2["text"] and train["text"] == train2["text"]
    assert val["text"] != val3["text"]
    assert len(train_validation_split(rows, 0.2, seed=7, max_validation_rows=4)[1]) == 4


def test_a_row_the_text_repeats_is_never_held_out_beside_its_copy_in_training(tmp_path):
    """A book repeats short paragraphs (*"Come in," said Oz.*): a copy drawn into the held-out rows while
    another trains would be scored as unseen text. It stays in training only; other held-out rows stay."""
    from hp_mlm.config import get_settings
    from hp_mlm.prepare import prepare

    same = " ".join(["Come in, said Oz."] * 12)  # 48 words: a row of its own at the smoke profile's 64 tokens
    (tmp_path / "same.txt").write_text(f"{same}\n" * 20, encoding="utf-8")  # nothing left to hold out
    texts = [f"sentence {i}" for i in range(40)] + ["Come in, said Oz."] * 10
    rows = Dataset.from_dict({"text": texts})
    train, val = train_validation_split(rows, 0.5, seed=3)
    assert "Come in, said Oz." in train["text"] and not set(train["text"]) & set(val["text"])
    assert len(val) == len([t for t in val["text"] if t.startswith("sentence")]) > 0
    assert len(train) + len(val) < len(rows)  # the held-out copies are dropped, not trained twice more
    with pytest.raises(ValueError, match="every held-out row repeats a training row; give your text more distinct"):
        prepare(get_settings("smoke", environ={}, dataset=str(tmp_path / "same.txt"), progress=False))


def test_unreachable_hub_gives_one_clear_error_within_seconds(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    started = time.perf_counter()
    with pytest.raises(HubUnavailableError) as info:
        load_corpus("andjela-r/mlm-harry-potter", "train[:10%]")
    assert time.perf_counter() - started < 10
    message = str(info.value)
    assert "andjela-r/mlm-harry-potter" in message and "local path" in message and "HF_HUB_OFFLINE" in message


def test_hub_endpoint_that_refuses_fails_fast(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens on the discard port
    started = time.perf_counter()
    with pytest.raises(HubUnavailableError, match="Cannot reach"):
        load_corpus("andjela-r/mlm-harry-potter")
    assert time.perf_counter() - started < 10


# --- the files learners have: the encodings Windows editors save in --------------------------------------------------

#: Text written for these tests, with letters outside ASCII that every one of the encodings below can hold.
ACCENTED = ["Zoë rowed the ferry to the café.", "Hob said “good morning” to Renée — twice."]


@pytest.mark.parametrize(
    "encode, read_as",
    [
        (lambda t: t.encode("utf-8"), "utf-8-sig"),
        (lambda t: codecs.BOM_UTF8 + t.encode("utf-8"), "utf-8-sig"),  # Notepad's "UTF-8 with BOM"
        (lambda t: codecs.BOM_UTF16_LE + t.encode("utf-16-le"), "utf-16"),  # Notepad's and Word's "Unicode"
        (lambda t: codecs.BOM_UTF16_BE + t.encode("utf-16-be"), "utf-16"),  # "Unicode big endian"
        (lambda t: t.encode("cp1252"), "cp1252"),  # Notepad's and Word's "ANSI"
    ],
)
def test_a_txt_saved_by_a_windows_editor_is_read_and_its_encoding_said(tmp_path, encode, read_as):
    """A .txt in cp1252 or UTF-16 used to be refused as "Cannot read ... as text (DatasetGenerationError)";
    it is read, its byte-order mark dropped, and the report names the encoding."""
    path = tmp_path / "mine.txt"
    path.write_bytes(encode("\n".join(ACCENTED) + "\n"))
    rows, report = load_corpus(str(path))
    assert rows["text"] == [" ".join(ACCENTED)] and report.encoding == read_as  # two paragraphs, one row


@pytest.mark.parametrize(
    "name, content",
    [
        ("notes.txt", "Zoë rowed home.\n".encode("utf-16-le")),  # UTF-16 without its byte-order mark
        ("notes.txt", b"PK\x03\x04\x14\x00\x06\x00" + bytes(range(256))),  # a word processor's file, renamed
        ("notes.docx", b"PK\x03\x04\x14\x00\x06\x00"),
        ("notes.pdf", b"%PDF-1.7\n"),
    ],
)
def test_a_file_that_is_not_text_gets_one_line_on_saving_it_as_utf8(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ValueError) as error:
        load_corpus(str(path))
    line = str(error.value)
    assert "\n" not in line and name in line and "UTF-8" in line and "plain text (.txt)" in line


def test_the_log_says_which_encoding_a_txt_was_read_in(tmp_path, smoke_model, smoke_tokenizer):
    from types import SimpleNamespace

    from hp_mlm.ops.job import log_data

    path = tmp_path / "mine.txt"
    path.write_bytes("\n".join(ACCENTED).encode("cp1252"))
    rows, report = load_corpus(str(path))
    prep = SimpleNamespace(
        report=report, train_rows=rows, validation_rows=rows, batches={"rows": 2, "tokens": 30, "padding_share": 0},
        settings=SimpleNamespace(padding="batch", max_length=64), loaded=SimpleNamespace(head_newly_initialised=False),
        truncated={"rows_cut": 0, "words_cut": 0},
    )  # fmt: skip
    lines: list[str] = []
    log_data(prep, lines.append)
    assert "text read as Windows cp1252" in lines


# --- the whole text of your own: long rows become extra rows --------------------------------------------------------


def test_your_own_texts_long_rows_are_kept_whole_and_the_shipped_corpus_keeps_truncation(tmp_path):
    """A learner's own text used to lose a third of a novel to truncation at ``max_length``; its long rows now
    become extra rows cut at word starts, nothing dropped, and the log says how many rows and tokens train. The
    package's corpus keeps its documented truncation."""
    from hp_mlm.config import get_settings
    from hp_mlm.ops.job import log_data
    from hp_mlm.prepare import prepare

    path = tmp_path / "my_book.txt"
    long_rows = [" ".join(f"Hob Tanner rowed the ferry across the lake on day {n}." for n in range(k, k + 8)) for k in range(20)]  # fmt: skip
    path.write_text("\n".join(long_rows) + "\n", encoding="utf-8")
    own = prepare(get_settings("smoke", environ={}, dataset=str(path), max_length=32, progress=False))
    assert own.settings.split_long_rows and own.truncated["rows_cut"] == own.truncated["tokens_dropped"] == 0
    assert own.batches["rows"] > 2 * len(own.train_rows) and max(own.train_tokens["length"]) <= 32
    lines: list[str] = []
    log_data(own, lines.append)
    assert any(f"{len(own.train_rows)} rows, the long ones cut at word starts: {own.batches['rows']} rows" in line for line in lines)  # fmt: skip
    shipped = prepare(get_settings("smoke", environ={}, max_length=16, progress=False))
    assert not shipped.settings.split_long_rows and shipped.truncated["rows_cut"] > 0
    assert shipped.batches["rows"] == len(shipped.train_rows)


BOOK_PARAGRAPHS = [
    "CHAPTER I",
    "Mira Ashdown crossed the Silver Lake at dawn, and the ferry creaked under her.",
    '"Who rows it?" she asked.',
    "1",
    "Hob Tanner rowed the ferry across the lake, as he had done every autumn since the old bell fell silent.",
]


def _book(tmp_path, layout: str, newline: str = "\n") -> str:
    """The same short book as a learner may have it: one paragraph a line, paragraphs between blank lines, or
    paragraphs wrapped into short lines between blank lines (Project Gutenberg's layout)."""
    if layout == "a paragraph a line":
        text = "\n".join(BOOK_PARAGRAPHS)
    elif layout == "blank lines between":
        text = "\n\n".join(BOOK_PARAGRAPHS) + "\n\n\n"
    else:  # wrapped at about 40 characters, blank lines between
        import textwrap

        text = "\n\n".join("\n".join(textwrap.wrap(p, 40)) for p in BOOK_PARAGRAPHS)
    path = tmp_path / f"{layout.replace(' ', '_')}.txt"
    path.write_bytes(text.replace("\n", newline).encode("utf-8"))
    return str(path)


@pytest.mark.parametrize("layout", ["a paragraph a line", "blank lines between", "wrapped"])
@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_a_txt_is_read_as_paragraphs_whatever_its_layout_and_blank_lines_are_never_rows(tmp_path, layout, newline):
    from hp_mlm.data import paragraph_rows, paragraphs

    path = _book(tmp_path, layout, newline)
    assert paragraphs(open(path, encoding="utf-8", newline="").read()) == BOOK_PARAGRAPHS
    rows, _ = load_corpus(path, "train", "text", max_length=128)
    assert rows["text"] == paragraph_rows(BOOK_PARAGRAPHS, 128) == [" ".join(BOOK_PARAGRAPHS)]  # one row of ~60 words
    short, _ = load_corpus(path, "train", "text", max_length=32)  # rows of at most 0.7 * 32 = 22 words
    assert " ".join(short["text"]) == " ".join(BOOK_PARAGRAPHS) and all(t.strip() for t in short["text"])
    # 2 + 14 + 5 + 1 words fit 22.4, 20 more would not: a chapter heading and a chapter number join a row
    assert short["text"] == [" ".join(BOOK_PARAGRAPHS[:4]), BOOK_PARAGRAPHS[4]]


def test_the_command_line_and_the_notebooks_read_the_same_rows_of_a_txt_whole_in_every_profile(tmp_path):
    """The command line's ``--dataset`` (an override) and a notebook's ``MY_TEXT`` (``HP_MLM_DATASET``) give the
    same settings and, through the loader the notebooks call and ``prepare``, the same rows: the whole text."""
    from hp_mlm.config import get_settings
    from hp_mlm.prepare import prepare

    book = tmp_path / "book.txt"
    book.write_text("\n\n".join(f"Paragraph {i} of the tale, where Mira rows the ferry again." for i in range(120)))
    for profile in ("quick", "full", "offline", "smoke"):
        cli = get_settings(profile, environ={}, dataset=str(book))
        notebook = get_settings(environ={"HP_MLM_PROFILE": profile, "HP_MLM_DATASET": str(book)})
        assert cli == notebook and cli.split == "train", profile  # never the profile's slice of the course's data
    assert get_settings("quick", environ={}, dataset=str(book), split="train[:3]").split == "train[:3]"  # asked for
    settings = get_settings("smoke", environ={}, dataset=str(book), progress=False)
    rows, report = load_corpus(settings.dataset, settings.split, settings.text_column, settings.max_length)
    prep = prepare(settings)
    assert sorted([*prep.train_rows["text"], *prep.validation_rows["text"]]) == sorted(rows["text"])
    assert report.n_rows == len(rows) < 120 and not any(not t.strip() for t in rows["text"])
    for stem in ("01_tokenising", "02_masking"):  # the notebooks call the loader with the run's max_length
        cells = json.loads((Path(__file__).parents[1] / "notebooks" / f"{stem}.ipynb").read_text())["cells"]
        calls = ["".join(c["source"]) for c in cells if "load_corpus(" in "".join(c["source"])]
        assert calls and all("settings.text_column, settings.max_length)" in call for call in calls), stem
