"""``python -m pgmux``: the same as the ``pgmux`` command."""

import sys

from pgmux.tooling.cli import main

sys.exit(main())
