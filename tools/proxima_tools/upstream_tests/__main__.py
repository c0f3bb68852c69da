"""``python -m proxima_tools.upstream_tests``."""

import sys

from proxima_tools.upstream_tests.cli import main

sys.exit(main())
