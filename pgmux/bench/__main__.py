"""``python -m pgmux.bench``: the benchmark suite."""

import sys

from pgmux.bench import main

sys.exit(main())
