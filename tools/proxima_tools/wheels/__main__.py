"""``python -m proxima_tools.wheels``."""

import sys

from proxima_tools.wheels.cli import main

sys.exit(main())
