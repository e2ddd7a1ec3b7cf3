"""hp-mlm: fine-tune BERT for masked language modelling on a book corpus, and measure what it learned.

One module per step of the pipeline: ``config`` -> ``data`` -> ``tokens`` -> ``masking`` ->
``training`` -> ``evaluation`` -> ``inference``, with helpers below them (``common``, ``hub``,
``profiles``) and ``prepare``, ``job``, ``study``, ``cli`` above; see ARCHITECTURE.md.
Importing the package loads no model, reads no file and touches no network.
"""

from __future__ import annotations

import os
from importlib import metadata

__version__ = "0.1.0"

#: Oldest major versions the course is written for (their APIs changed in 5.x).
REQUIRED_MAJOR = {"transformers": 5, "datasets": 5}


def _check_versions() -> None:
    for package, major in REQUIRED_MAJOR.items():
        try:
            found = metadata.version(package)
        except metadata.PackageNotFoundError:
            raise ImportError(f"hp_mlm needs {package}>={major}; install it with: pip install -r requirements.txt") from None
        if int(found.split(".")[0]) < major:
            raise ImportError(
                f"hp_mlm needs {package}>={major}, but {package} {found} is installed; "
                f"upgrade with: pip install -U '{package}>={major}' (then restart the runtime)"
            )


_check_versions()
# Quiet the tokenizers fork warning that older versions print into notebooks (a user's value wins).
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
