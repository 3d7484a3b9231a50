"""``python -m prh_lib``: the notebook runner (same as ``prh-run``)."""

import sys

from prh_lib.run.runner import main

sys.exit(main())
