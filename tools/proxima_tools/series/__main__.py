"""``python -m proxima_tools.series``."""

import sys

from proxima_tools.series.cli import main

sys.exit(main())
