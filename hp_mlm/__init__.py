"""hp-mlm: fine-tune BERT for masked language modelling on a book corpus, and measure what it learned.

The learner's core is this folder, one module per step that notebooks 00-04 teach:
``config`` -> ``data`` and ``models`` -> ``tokens`` -> ``masking`` -> ``training`` -> ``evaluation``
-> ``scoring`` and ``inference``. The rest lives in subpackages the core never imports: ``course``
(exercise checks, quizzes, pictures), ``studies`` (notebooks 05-06) and ``ops`` (the command line,
the main job, doctor); see ARCHITECTURE.md.
Importing the package loads no model and touches no network. The only files it reads hold version
numbers: the installed packages' metadata (it imports none of them), and in a source checkout the
``version`` line of pyproject.toml, the course's own (``__version__``).
"""

from __future__ import annotations

import os

from .ops.versions import course_version, guard_at_import

__version__ = course_version()  # pyproject.toml's, or the installed release's

guard_at_import()  # one clear line when this Python session cannot run the course
# Quiet the tokenizers fork warning that older versions print into notebooks (a user's value wins).
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
