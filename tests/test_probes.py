"""Probes whose answer is several word pieces: scored by whole words and by rank among candidates,
never by the first piece, and reported apart from the one-piece probes."""

import json

import pytest
import torch

from hp_mlm.scoring import score_words
from hp_mlm.studies.probes import load_probes, read_candidates, score_probes


def _write(path, probes):
    path.write_text("".join(json.dumps(p) + "\n" for p in probes), encoding="utf-8")
    return path


def _favour(model, tokenizer, pieces, by=100.0):
    """Raise the output bias of ``pieces`` so the model predicts them everywhere."""
    with torch.no_grad():
        for piece in pieces:
            model.cls.predictions.bias[tokenizer.convert_tokens_to_ids(piece)] += by


def test_a_multi_piece_answer_is_right_only_as_a_whole_word(tmp_path, smoke_tokenizer, smoke_model):
    probes = load_probes(
        _write(
            tmp_path / "p.jsonl",
            [
                {"text": "Mira [MASK] smiled.", "answer": "above"},  # a ##bo ##ve
                {"text": "Mira [MASK] smiled.", "answer": "Ashdown"},  # one token here
            ],
        )
    )
    _favour(smoke_model, smoke_tokenizer, ["a"], by=50.0)  # the first piece alone wins every mask
    result = score_probes(smoke_model, smoke_tokenizer, probes)
    multi, one = result["rows"]
    assert multi["kind"] == "multi_piece" and multi["pieces"] == ["a", "##bo", "##ve"]
    assert not multi["hit_top1"] and multi["top1"] != "above"  # "a" is not "above"
    assert one["kind"] == "one_piece"
    assert result["by_kind"]["multi_piece"]["n"] == 1 and result["by_kind"]["one_piece"]["n"] == 1
    _favour(smoke_model, smoke_tokenizer, ["##bo", "##ve"])  # now a, abo, ave, above ... share the top
    result = score_probes(smoke_model, smoke_tokenizer, probes, top_k=10)
    assert "above" in result["rows"][0]["topk"] and result["rows"][0]["hit_topk"]
    assert all(not w.startswith("##") for w in result["rows"][0]["topk"])
    assert result["by_kind"]["multi_piece"]["hits_topk"] == 1
    assert result["hits_topk"] == sum(result["by_kind"][k]["hits_topk"] for k in ("one_piece", "multi_piece"))


def test_candidates_are_ranked_by_whole_word_scores(tmp_path, smoke_tokenizer, smoke_model):
    words = ["above", "mira", "tower", "among"]
    probes = load_probes(
        _write(tmp_path / "p.jsonl", [{"text": "Mira [MASK] smiled.", "answer": "Tower", "candidates": words}])
    )
    (row,) = score_probes(smoke_model, smoke_tokenizer, probes)["rows"]
    expected = sorted(
        score_words(smoke_model, smoke_tokenizer, "Mira [MASK] smiled.", words), key=lambda s: -s["log_prob"]
    )
    assert [c["word"] for c in row["candidates"]] == [s["word"] for s in expected]
    assert row["candidate_rank"] == [s["word"] for s in expected].index("tower") + 1
    _favour(smoke_model, smoke_tokenizer, ["tower"])
    result = score_probes(smoke_model, smoke_tokenizer, probes)
    assert result["rows"][0]["candidate_rank"] == 1
    assert result["candidates_top1"] == 1 and result["candidates_mrr"] == 1.0


def test_candidates_must_hold_the_answer_and_a_shared_list_gains_it(tmp_path):
    bad = _write(tmp_path / "bad.jsonl", [{"text": "[MASK] smiled.", "answer": "ozma", "candidates": ["tip"]}])
    with pytest.raises(ValueError, match="bad.jsonl:1: the answer 'ozma' is not among its candidates"):
        load_probes(bad)
    empty = _write(tmp_path / "empty.jsonl", [{"text": "[MASK] smiled.", "answer": "ozma", "candidates": []}])
    with pytest.raises(ValueError, match="non-empty list of words"):
        load_probes(empty)
    shared = tmp_path / "words.txt"
    shared.write_text("tip, jinjur\nmombi\n\n", encoding="utf-8")
    assert read_candidates(shared) == ["tip", "jinjur", "mombi"]
    plain = _write(tmp_path / "plain.jsonl", [{"text": "[MASK] smiled.", "answer": "ozma"}])
    assert load_probes(plain, candidates=read_candidates(shared))[0]["candidates"] == ["tip", "jinjur", "mombi", "ozma"]
    (tmp_path / "none.txt").write_text("\n", encoding="utf-8")
    with pytest.raises(ValueError, match="holds no word"):
        read_candidates(tmp_path / "none.txt")


def test_a_candidates_file_reaches_every_probe_of_the_main_job(tmp_path):
    """``train --candidates FILE``: the job reads it with the probes, before any model is loaded."""
    from hp_mlm.config import get_settings
    from hp_mlm.ops.job import check_before_loading

    probes = _write(tmp_path / "p.jsonl", [{"text": "[MASK] smiled.", "answer": "mira"}])
    words = tmp_path / "words.txt"
    words.write_text("ashdown\nhollin\n", encoding="utf-8")
    settings = get_settings("smoke", environ={}, output_dir=str(tmp_path / "out"))
    (probe,) = check_before_loading(settings, probes, False, False, None, lambda _: None, words)
    assert probe["candidates"] == ["ashdown", "hollin", "mira"]
    with pytest.raises(FileNotFoundError, match="candidates file"):
        check_before_loading(settings, probes, False, False, None, lambda _: None, tmp_path / "missing.txt")
