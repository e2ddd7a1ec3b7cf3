"""The before/after widget: driven as a learner would (type a sentence, a target word, read both
tables), its printed table where no widget front end runs, and where the stock model is kept."""

from __future__ import annotations

import copy
import html
import re

import pytest
import torch

from hp_mlm.course import widget
from hp_mlm.course.widget import answer_label, before_after, format_text, place_stock, show_before_after, stock_device
from hp_mlm.inference import fill_words

SENTENCE = "Every autumn, Hob [MASK] repainted his ferry."


def boosted(model, tokenizer, *tokens, by=12.0):
    """A copy of ``model`` whose output layer favours ``tokens`` everywhere: a stand-in for fine-tuning."""
    tuned = copy.deepcopy(model)
    with torch.no_grad():
        for token in tokens:
            tuned.cls.predictions.decoder.bias[tokenizer.convert_tokens_to_ids(token)] += by
    return tuned


@pytest.fixture()
def models(smoke_model, smoke_tokenizer):
    return smoke_model, boosted(smoke_model, smoke_tokenizer, "tanner")


def test_without_a_front_end_it_prints_both_models_guesses_and_the_target(models, smoke_tokenizer, capsys, monkeypatch):
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    stock, tuned = models
    result = show_before_after(stock, tuned, smoke_tokenizer, SENTENCE, top_k=4, target="tanner")
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == SENTENCE and "before (stock model)" in lines[1] and lines[1].endswith("after (fine-tuned)")
    expected = fill_words(stock, smoke_tokenizer, SENTENCE, top_k=4)[0][0]
    assert [a["token"] for a in result["masks"][0]["stock"]] == [a["token"] for a in expected]
    first = lines[2].split()
    assert (
        first[:2] == ["1", expected[0]["token"]] and first[-2] == "tanner"
    )  # rank 1: the stock's guess, then "tanner"
    assert len(lines) == 2 + 4 + 1
    before, after = result["target"]["stock"][0], result["target"]["tuned"][0]
    assert after > 0.5 > 0.01 > before
    assert re.fullmatch(r'"tanner" at mask 1: before [\d.]+%, after [\d.]+% \(x[\d,]+\)', lines[-1])


def test_every_mask_gets_its_own_table_and_target_line(models, smoke_tokenizer):
    result = before_after(*models, smoke_tokenizer, "[MASK] rowed the ferry to [MASK].", top_k=2, target="tanner")
    text = format_text(result)
    assert text.count("mask 1 ") == 1 and text.count("mask 2 ") == 1
    assert '"tanner" at mask 1' in text and '"tanner" at mask 2' in text
    assert len(result["target"]["stock"]) == len(result["target"]["tuned"]) == 2


def test_a_word_of_several_pieces_is_marked_with_its_pieces(smoke_model, smoke_tokenizer):
    tuned = boosted(smoke_model, smoke_tokenizer, "blue", "##ing")
    result = before_after(smoke_model, tuned, smoke_tokenizer, SENTENCE, top_k=3)
    longer = [a for a in result["masks"][0]["tuned"] if len(a["pieces"]) > 1]
    assert longer and longer[0]["pieces"] == ["blue", "##ing"]
    assert "blueing [blue ##ing]" in format_text(result)
    one_token = before_after(smoke_model, tuned, smoke_tokenizer, SENTENCE, top_k=3, whole_words=False)
    assert "##ing (piece)" in format_text(one_token)  # a lone piece, not a word
    assert (
        answer_label({"token": "ashdown", "pieces": ["ash", "##down"], "is_subword": False}) == "ashdown [ash ##down]"
    )


def test_the_widget_redraws_both_tables_when_the_learner_types(models, smoke_tokenizer, monkeypatch):
    pytest.importorskip("ipywidgets")
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda data, **options: shown.append((data, options)))
    stock, tuned = models
    w = show_before_after(stock, tuned, smoke_tokenizer, SENTENCE, top_k=3, widgets=True)
    ((data, options),) = shown  # the widget, and a static copy of its tables for a page without widgets
    assert options == {"raw": True} and data["application/vnd.jupyter.widget-view+json"]["model_id"] == w.box._model_id
    assert "<caption>mask 1</caption><tr><td>1</td><td>tanner</td>" in data["text/html"]
    assert data["text/plain"] == format_text(w.result) and "tanner" in data["text/plain"]
    assert w.sentence in w.box.children and w.target in w.box.children
    assert "<caption>mask 1</caption><tr><td>1</td><td>tanner</td>" in w.after.value
    assert "tanner" not in w.before.value and w.target_line.value == "" and w.message.value == ""

    w.sentence.value = "Nell [MASK] found a mistfox in the [MASK]."  # as if typed and Enter pressed
    for column, model in ((w.before, stock), (w.after, tuned)):
        guesses = fill_words(model, smoke_tokenizer, w.sentence.value, top_k=3)[0]
        assert column.value.count("<caption>") == 2
        assert all(
            f"<td>{html.escape(answer_label(a), quote=False)}</td>" in column.value for mask in guesses for a in mask
        )

    w.target.value = "tanner"
    assert '"tanner" at mask 1' in w.target_line.value and '"tanner" at mask 2' in w.target_line.value

    w.sentence.value = "A sentence with no gap."
    assert "no mask token" in w.message.value and w.before.value == w.after.value == w.target_line.value == ""
    w.sentence.value = SENTENCE
    assert w.message.value == "" and "tanner" in w.after.value


def test_a_model_passed_in_stays_where_it_is(models, smoke_tokenizer):
    stock, tuned = models
    assert place_stock(stock, tuned, smoke_tokenizer) == (stock, "")


def test_the_stock_model_stays_on_the_cpu_when_the_gpu_is_short(models, smoke_tokenizer, monkeypatch, capsys):
    gpu = torch.device("cuda", 0)
    assert stock_device(gpu, needed=2 * 2**30, free=1 * 2**30) == torch.device("cpu")
    assert stock_device(gpu, needed=2 * 2**30, free=8 * 2**30) == gpu
    assert stock_device(torch.device("cpu"), needed=2 * 2**30, free=None).type == "cpu"
    # a fine-tuned model on a GPU with 100 MiB free: the stock model, loaded by name, stays on the CPU and says so
    monkeypatch.setattr(widget, "model_device", lambda model: gpu)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (100 * 2**20, 80 * 2**30))
    stock, note = place_stock("hp_mlm:smoke-bert", models[1], smoke_tokenizer)
    assert next(stock.parameters()).device.type == "cpu"
    assert note.startswith("stock model hp_mlm:smoke-bert kept on the CPU: the GPU has 0.1 GiB free")
    show_before_after("hp_mlm:smoke-bert", models[1], smoke_tokenizer, SENTENCE, widgets=False)
    assert capsys.readouterr().out.startswith("stock model hp_mlm:smoke-bert kept on the CPU")


def test_the_text_path_raises_what_the_widget_shows(models, smoke_tokenizer):
    with pytest.raises(ValueError, match="no mask token"):
        show_before_after(*models, smoke_tokenizer, "No gap here.", widgets=False)


def test_a_notebook_without_widgets_gets_the_tables_as_html_beside_the_text(models, smoke_tokenizer, monkeypatch):
    """nbconvert and nbval run a kernel but no widget front end: the saved notebook (and the website built
    from it) shows the two tables, not a printed block only."""
    shown = []
    monkeypatch.setattr(widget, "in_kernel", lambda: True)
    monkeypatch.setattr("IPython.display.display", lambda data, **options: shown.append((data, options)))
    stock, tuned = models
    result = show_before_after(stock, tuned, smoke_tokenizer, SENTENCE, top_k=3, target="tanner", widgets=False)
    ((data, options),) = shown
    assert options == {"raw": True} and set(data) == {"text/html", "text/plain"}
    assert data["text/plain"] == format_text(result) and data["text/html"].count("<caption>mask 1</caption>") == 2
    assert '"tanner" at mask 1' in data["text/html"]


def test_the_token_view_lists_words_never_special_tokens(smoke_model, smoke_tokenizer):
    specials = smoke_tokenizer.all_special_tokens
    tuned = boosted(smoke_model, smoke_tokenizer, *specials, by=50.0)  # the specials first in its logits
    result = before_after(smoke_model, tuned, smoke_tokenizer, SENTENCE, top_k=5, whole_words=False)
    listed = [a["pieces"][0] for mask in result["masks"] for a in mask["tuned"] + mask["stock"]]
    assert len(listed) == 10 and not set(listed) & set(specials)
    assert not any(s in format_text(result) for s in specials if s != "[MASK]")  # the sentence shows its [MASK]


def test_the_call_the_reference_gives_opens_on_the_runs_own_first_example(
    models, smoke_tokenizer, monkeypatch, tmp_path
):
    """``show_before_after(base, tuned, tokenizer)``, no sentence: the active profile's premise with its word as the
    target (the offline profile's Hob, never the books' Harry), and on a corpus of your own the first sentence
    picked from its held-out rows, as notebook 00 opens."""
    from importlib import resources

    from hp_mlm.config import get_settings
    from hp_mlm.course.premise import premise

    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    for profile in ("offline", "smoke"):
        monkeypatch.setenv("HP_MLM_PROFILE", profile)
        result = show_before_after(*models, smoke_tokenizer, widgets=False)
        sentence, (word,) = premise(get_settings(profile, environ={}))
        assert result["sentence"] == sentence and "Harry" not in sentence
        assert result["target"]["word"] == word
    assert "Hob [MASK]" in widget.opening(get_settings("offline", environ={}))[0]
    lines = (resources.files("hp_mlm") / "corpora" / "smoke_corpus.txt").read_text(encoding="utf-8").splitlines()
    (tmp_path / "mine.txt").write_text("\n".join(lines[:200]), encoding="utf-8")  # ships no examples
    mine = get_settings("smoke", environ={}, dataset=str(tmp_path / "mine.txt"), output_dir=str(tmp_path / "o"))
    result = show_before_after(*models, smoke_tokenizer, widgets=False, settings=mine)
    assert result["sentence"] == premise(mine)[0]
    (tmp_path / "lower.txt").write_text("\n".join(lines[:200]).lower(), encoding="utf-8")  # no names to pick
    plain = get_settings("smoke", environ={}, dataset=str(tmp_path / "lower.txt"), output_dir=str(tmp_path / "p"))
    assert widget.opening(plain) == (widget.PLAIN_EXAMPLE[0], "paris")
