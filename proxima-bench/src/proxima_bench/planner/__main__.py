"""``python -m proxima_bench.planner``: the capacity planner (see ``plan``)."""

import sys

from proxima_bench.planner.plan import main

sys.exit(main())
