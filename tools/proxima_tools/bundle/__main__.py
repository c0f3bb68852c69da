"""``python -m proxima_tools.bundle``."""

import sys

from proxima_tools.bundle.cli import main

sys.exit(main())
