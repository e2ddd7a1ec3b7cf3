"""``python -m hp_mlm``: see ``hp_mlm.cli``."""

import sys

from .cli import main

sys.exit(main())
