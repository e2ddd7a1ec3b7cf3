"""A learner's text trains in a room's time: its passes fit ``profiles.ROOM_STEPS``, said before training."""

from __future__ import annotations

import pytest

from hp_mlm.config import get_settings, resolve_auto
from hp_mlm.profiles import HEAD_AUTO, ROOM_STEPS


@pytest.mark.parametrize(
    "steps_per_epoch, new_head, epochs",
    [(69, True, 7), (200, True, 2), (1000, True, 1), (10, True, 12), (69, False, 3), (400, False, 1)],
)
def test_a_learners_text_gets_the_whole_passes_that_fit_a_room(steps_per_epoch, new_head, epochs):
    book = get_settings("offline", environ={}, dataset="/content/my_book.txt")
    resolved = resolve_auto(book, new_head=new_head, steps_per_epoch=steps_per_epoch)
    most = HEAD_AUTO["new" if new_head else "pretrained"]["epochs"]
    assert resolved.epochs == epochs == max(1, min(most, round(ROOM_STEPS / steps_per_epoch)))


def test_the_courses_corpora_and_epochs_a_learner_sets_are_never_resized():
    assert resolve_auto(get_settings("offline", environ={}), new_head=True, steps_per_epoch=40).epochs == 12
    assert resolve_auto(get_settings("full", environ={}), new_head=False, steps_per_epoch=900).epochs == 3
    mine = get_settings("offline", environ={}, dataset="/content/my_book.txt", epochs=9)
    assert resolve_auto(mine, new_head=True, steps_per_epoch=69).epochs == 9


def test_the_run_is_said_before_training_in_passes_and_minutes_with_what_more_would_cost(tmp_path):
    from hp_mlm.course.runs import run_length
    from hp_mlm.prepare import prepare

    book = tmp_path / "book.txt"
    book.write_text("\n\n".join(f"Paragraph {i}: Mira rowed the ferry and Hob rang the bell." for i in range(4000)))
    settings = get_settings("smoke", environ={"HP_MLM_EPOCHS": "auto"}, dataset=str(book), progress=False)
    prep = prepare(settings)
    text = run_length(prep, sized=True)
    each = -(-prep.batches["rows"] // prep.settings.batch_size)
    assert text.startswith(
        f"{each * prep.settings.epochs} optimiser steps: {prep.settings.epochs} passes over the text"
    )
    assert f"({each} steps each), about " in text and " min of training at this machine's pace" in text
    assert prep.settings.epochs < 12 and "sized for a room: 12 passes (HP_MLM_EPOCHS=12) would take about" in text
    assert "sized for a room" not in run_length(prep, sized=False)  # a learner who set the epochs is not told again
