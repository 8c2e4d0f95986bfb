"""``python -m bench.harness``: see :mod:`bench.harness.run`."""

import sys

from bench.harness.run import main

sys.exit(main())
