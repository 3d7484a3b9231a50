"""Running the book: :mod:`~prh_lib.run.runner` (``prh-run``), :mod:`~prh_lib.run.schedule` (notebooks on
every core, stopping cleanly), :mod:`~prh_lib.run.freshness` (what is out of date),
:mod:`~prh_lib.run.profiles` (named parameter sets), :mod:`~prh_lib.run.rehearsal` (the paper path on
stand-ins), :mod:`~prh_lib.run.profile_audit` and :mod:`~prh_lib.run.book` (placeholders and the Jupyter
Book build). Nothing below imports this package."""
