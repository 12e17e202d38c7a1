"""``python -m pgmux.tooling.bench``: the benchmark suite."""

import sys

from pgmux.tooling.bench import main

sys.exit(main())
