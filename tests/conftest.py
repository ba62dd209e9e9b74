"""Test configuration shared by tests/core and tests/ui.

Qt runs offscreen in every test (set here, before anything imports Qt), and torch is imported before Qt, as in
the app. Torch is limited to the machine's cores so that a test run does not oversubscribe a small CI machine.
"""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
import torch  # noqa: E402,F401  (before any Qt import)


@pytest.fixture
def hub(tmp_path):
    """A private torch hub cache (its checkpoints folder): downloads and cached weights never touch the user's."""
    previous = torch.hub.get_dir()
    torch.hub.set_dir(str(tmp_path / "hub"))
    yield tmp_path / "hub" / "checkpoints"
    torch.hub.set_dir(previous)
