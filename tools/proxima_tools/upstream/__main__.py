"""``python -m proxima_tools.upstream``."""

import sys

from proxima_tools.upstream.cli import main

sys.exit(main())
