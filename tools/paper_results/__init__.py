"""The seed papers against aiotsim: the runs, tables and claims of ``docs/RESULTS.md``.

``tools/results.py`` is the command; this package holds its parts, one module per job:
:mod:`.runner` (cached run directories keyed by the code that made them), :mod:`.markdown`
(tables, number formats and the claims table), one module per seed document
(:mod:`.seed000` ... :mod:`.seed004`) and :mod:`.full` (the paper-scale rows on a GPU).
"""
