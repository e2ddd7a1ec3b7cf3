"""``python -m hp_mlm`` and the ``hp-mlm`` script: see ``hp_mlm.ops.cli``. ``doctor`` runs before the
command line is built (which needs torch), so it works with torch or transformers missing."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Run ``doctor``, else the command line (``cli.main``); returns the exit status."""
    from hp_mlm.ops.doctor import run_if_asked

    argv = sys.argv[1:] if argv is None else list(argv)
    status = run_if_asked(argv)
    if status is not None:
        return status
    from hp_mlm.ops.cli import main as cli

    return cli(argv)


if __name__ == "__main__":
    sys.exit(main())
