"""nbval settings for the course notebooks (``pytest --nbval-lax notebooks/``).

Only cells whose first line is ``# NBVAL_CHECK_OUTPUT`` have their outputs compared, and their
stderr is never compared: warnings and progress bars go there, and that text changes from run to
run (the fix suggested in computationalmodelling/nbval#88).

Progress bars are switched off in the kernels that nbval starts. Nobody sees them there, and a
notebook progress bar sends many widget messages: nbval reads the kernel's output channel only
after a cell finishes, so with thousands of them queued the channel drops messages, the cell's
end-of-output message among them, and nbval fails the cell with "Timeout ... waiting for output".
"""

import os

import pytest

#: Environment of the notebook kernels under nbval (a kernel inherits it when it starts).
KERNEL_ENV = {"HP_MLM_PROGRESS": "0", "TQDM_DISABLE": "1"}


def pytest_collectstart(collector):
    if hasattr(collector, "skip_compare"):  # nbval's notebook collector
        collector.skip_compare = (*collector.skip_compare, "stderr")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    # nbval starts a notebook's kernel while setting up its first cell; change the environment for
    # that moment only, so that tests outside notebooks/ never see these variables
    saved = {name: os.environ.get(name) for name in KERNEL_ENV}
    os.environ.update(KERNEL_ENV)
    try:
        return (yield)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
