"""Pages: what a reader sees. One module per notebook (its tables, findings, generated prose, claim rows
and figures), read from the numbers :mod:`prh_lib.analysis` computes, plus what every page shares:
:mod:`~prh_lib.pages.claims` (the paper's claims, verdicts, the front-page checklist),
:mod:`~prh_lib.pages.report` (records, page tables, figure captions), :mod:`~prh_lib.pages.figures` and
:mod:`~prh_lib.pages.plots` (matplotlib). Editing anything here recomputes no score (the score cache's
digest does not cover this folder)."""
