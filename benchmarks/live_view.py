"""Keep a real run's live view: its frames for notebook 00, and the README's picture drawn from them.

    python -m hp_mlm train --profile offline --no-progress --output-dir RUN
    python benchmarks/live_view.py RUN/metrics.json offline --picture docs/images/live_view.png

Writes ``hp_mlm/corpora/frames_<profile>.json`` (the watch's frames and first steps, the example sentences
and the command; notebook 00 shows the last frame as "after" where no model of the learner's is saved) and,
with ``--picture``, the PNG that ``hp_mlm.course.plots.plot_live_view`` draws from them. Only a corpus the
project wrote may be kept this way (the frames quote its sentences).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hp_mlm.common import atomic_write_text
from hp_mlm.course.plots import plot_live_view, save_figure

ROOT = Path(__file__).resolve().parents[1]
#: The profiles whose corpus the project wrote: only their frames may be kept.
OWN_CORPORA = ("offline", "smoke")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("metrics", help="a run's metrics.json")
    parser.add_argument("profile", choices=OWN_CORPORA, help="the profile the run used")
    parser.add_argument("--picture", help="also draw the live view as a PNG here")
    args = parser.parse_args()
    metrics = json.loads(Path(args.metrics).read_text(encoding="utf-8"))
    kept = {
        "command": f"python -m hp_mlm train --profile {args.profile} --no-progress",
        "examples": [{"text": e["text"], "answers": e["answers"]} for e in metrics["examples"]],
        **metrics["watch"],
    }
    out = ROOT / "hp_mlm" / "corpora" / f"frames_{args.profile}.json"
    atomic_write_text(out, json.dumps(kept, indent=1) + "\n")
    print(f"wrote {out.relative_to(ROOT)}: {len(kept['frames'])} frames")
    if args.picture:
        print(f"drew {save_figure(plot_live_view(kept), args.picture)}")


if __name__ == "__main__":
    main()
