"""The fuzzing campaign's pieces (``tools/fuzz_campaign.py`` runs them): case execution
(:mod:`fuzz.execute`), scenario mutations (:mod:`fuzz.scenarios`), damaged input files
(:mod:`fuzz.inputs`, :mod:`fuzz.datafiles`), run directories (:mod:`fuzz.rundirs`), command-line
edges (:mod:`fuzz.cli_cases`) and signals (:mod:`fuzz.signals`)."""
