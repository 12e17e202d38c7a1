"""``python -m pgmux``: the same as the ``pgmux`` command."""

import sys

from pgmux.cli import main

sys.exit(main())
