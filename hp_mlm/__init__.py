"""hp-mlm: fine-tune BERT for masked language modelling on a book corpus, and measure what it learned.

The learner's core is this folder, one module per step that notebooks 00-04 teach:
``config`` -> ``data`` and ``models`` -> ``tokens`` -> ``masking`` -> ``training`` -> ``evaluation``
-> ``scoring`` and ``inference``. The rest lives in subpackages the core never imports: ``course``
(exercise checks, quizzes, pictures), ``studies`` (notebooks 05-06) and ``ops`` (the command line,
the main job, doctor); see ARCHITECTURE.md.
Importing the package loads no model, reads no file and touches no network (it only reads the
installed packages' version numbers, and imports none of them).
"""

from __future__ import annotations

import os
import sys

from .ops.versions import check_versions

__version__ = "0.1.0"

# The command line: `python -m hp_mlm` (also under accelerate launch or torchrun) or `hp-mlm`
_COMMAND_LINE = os.path.basename(sys.argv[0]) in ("-m", "hp-mlm", "__main__.py")
# `python -m hp_mlm doctor` (or `hp-mlm doctor`) reports a wrong version instead of stopping on it
if not (sys.argv[1:2] == ["doctor"] and _COMMAND_LINE):
    try:
        check_versions()
    except ImportError as error:
        if not _COMMAND_LINE:
            raise
        # the CLI's own handler is not running yet: its one line, with the help entry, from here
        from .ops.troubleshooting import pointer

        print(f"error: {error}{pointer(error)}", file=sys.stderr)
        raise SystemExit(2) from None
# Quiet the tokenizers fork warning that older versions print into notebooks (a user's value wins).
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
