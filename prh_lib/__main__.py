"""``python -m prh_lib``: the notebook runner (same as ``prh-run``)."""

import sys

from .runner import main

sys.exit(main())
