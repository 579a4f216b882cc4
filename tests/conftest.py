"""Session-wide guards for the test process (not fixtures of any one test).

torch and torchvision are imported here, at collection, although the driver imports torchvision
only when a CIFAR/SVHN file is read (trainables/datafiles.py): with torchvision first imported late
in the test process, that process can segfault at interpreter exit after every test has passed
(cause not established). Tests that start Ray in this
process shut it down themselves; the hook below makes sure no Ray is left running at exit.
"""
import torch  # noqa: F401
import torchvision  # noqa: F401


def pytest_sessionfinish(session, exitstatus):
    import sys

    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()
