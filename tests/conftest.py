import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A passed test marked ``fault_outcome(item, fault, outcome)`` records its outcome once."""
    report = (yield).get_result()
    if report.when == "call" and report.passed:
        marker = item.get_closest_marker("fault_outcome")
        if marker is not None:
            from faults import record_marked_outcome

            record_marked_outcome(*marker.args, test=item.nodeid)
