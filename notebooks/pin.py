"""Point every notebook's install cell at one release of the course: ``HP_MLM_REF = "<ref>"``.

The install cell installs ``git+<repository>@HP_MLM_REF`` in Colab, so a copy saved to Drive keeps the
package its cells were executed with. ``<ref>`` is the release's tag once it is pushed, or, before a tag
exists, the full hash of the commit that holds today's package (``hp_mlm/`` and ``pyproject.toml``);
``tests/test_release.py`` checks either (docs/releasing.md):

    python notebooks/pin.py v0.2.0
    python notebooks/pin.py "$(git rev-parse HEAD)"
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parent


def main(ref: str) -> int:
    """Rewrite the ``HP_MLM_REF`` line of every notebook's source in place (the JSON's quotes escaped)."""
    for path in sorted(NOTEBOOKS.glob("**/*.ipynb")):
        text = path.read_text(encoding="utf-8")
        pinned = re.sub(r'(HP_MLM_REF = )\\"[^\\"]*\\"', lambda m: f'{m.group(1)}\\"{ref}\\"', text)
        if pinned != text:
            path.write_text(pinned, encoding="utf-8")
            print(f"{path.relative_to(NOTEBOOKS)}: HP_MLM_REF = {ref!r}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit('usage: python notebooks/pin.py <tag or commit>  (e.g. "$(git rev-parse HEAD)")')
    sys.exit(main(sys.argv[1]))
