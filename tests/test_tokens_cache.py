"""The tokenised rows in ``datasets``' cache: found again by a later process with the same settings, re-made
when a setting changes (a learner's sessions on Colab, each a new process, with the cache on Drive)."""

import json
import os
import subprocess
import sys
from pathlib import Path

from helpers import ROOT, SENTENCES

#: One session: the learner's text prepared as the notebooks and the main job prepare it.
SESSION = """
import sys
from hp_mlm.config import get_settings
from hp_mlm.prepare import prepare
prepare(get_settings("smoke", environ={}, dataset=sys.argv[1], max_length=int(sys.argv[2]), progress=False))
"""


def session(text: Path, cache: Path, max_length: int, hash_seed: str) -> list[str]:
    """Run one session in a new process (its own string hashing, as every new Python process has); returns
    the names of the tokenised rows' cache files in ``cache`` afterwards."""
    env = {**os.environ, "HF_DATASETS_CACHE": str(cache), "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", SESSION, str(text), str(max_length)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return sorted(p.name for p in cache.rglob("cache-*.arrow"))


def test_a_second_session_reuses_the_tokenised_rows_and_a_changed_setting_remakes_them(tmp_path):
    # a table of rows (a .txt is read into memory, quickly, and tokenised again each session: it has no cache file)
    text = tmp_path / "my_book.jsonl"  # names that recur, so the rows are tokenised with their entities marked
    rows = [
        f"{sentence} So ended part {part}." for part in "one two three four five six".split() for sentence in SENTENCES
    ]
    text.write_text("".join(json.dumps({"text": row}) + "\n" for row in rows), encoding="utf-8")  # distinct rows
    cache = tmp_path / "cache"
    first = session(text, cache, 48, hash_seed="1")
    assert first, "the first session wrote no cache of tokenised rows"
    assert session(text, cache, 48, hash_seed="2") == first  # reused: no new file
    changed = session(text, cache, 32, hash_seed="3")
    assert set(first) < set(changed)  # max_length changed: tokenised again, into new files
