"""``python -m hp_mlm``: see ``hp_mlm.cli``; ``doctor`` runs before the command line is built, so it
works with torch or transformers missing."""

import sys

if sys.argv[1:2] == ["doctor"]:
    from .doctor import main as doctor

    sys.exit(doctor(sys.argv[2:]))

from .cli import main  # noqa: E402 - after the doctor's early exit

sys.exit(main())
