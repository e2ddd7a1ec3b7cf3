"""nbval settings for the course notebooks (``pytest --nbval-lax notebooks/``).

Only cells whose first line is ``# NBVAL_CHECK_OUTPUT`` have their outputs compared. Their
stderr is never compared: warnings and progress bars go there, and their text (timings, chunking)
changes from run to run (the fix suggested in computationalmodelling/nbval#88).
"""


def pytest_collectstart(collector):
    if hasattr(collector, "skip_compare"):  # nbval's notebook collector
        collector.skip_compare = (*collector.skip_compare, "stderr")
