"""``python -m prh_lib.batch``: the study runner (same as ``prh-batch``)."""

import sys

from prh_lib.batch import main

sys.exit(main())
