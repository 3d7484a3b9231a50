"""``python -m prh_lib.batch``: the study runner (same as ``prh-batch``)."""

import sys

from . import main

sys.exit(main())
