"""``python -m proxima_bench.workloads``: write one workload file (see ``datasets``)."""

import sys

from proxima_bench.workloads.datasets import main

sys.exit(main())
