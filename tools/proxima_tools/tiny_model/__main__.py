"""``python -m proxima_tools.tiny_model``."""

import sys

from proxima_tools.tiny_model.cli import main

sys.exit(main())
