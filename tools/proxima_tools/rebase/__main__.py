"""``python -m proxima_tools.rebase``."""

import sys

from proxima_tools.rebase.cli import main

sys.exit(main())
