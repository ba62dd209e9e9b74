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


# Parametrized checks whose first cases run by default and whose further cases (the same check on more commands or
# inputs, a few seconds each in a subprocess) are marked slow, to keep the default run under 15 minutes on two
# cores: `python -m pytest -m slow` runs them. The number is how many cases stay in the default run.
FIRST_CASES_ONLY = {
    "tests/core/test_write_errors.py::test_a_blocked_output_is_one_line_naming_it": 3,
    "tests/core/test_hub.py::test_what_cannot_be_opened_is_one_line_exit_2": 2,
    "tests/core/test_cli.py::test_errors_are_one_readable_line": 3,
    "tests/core/test_script_export.py::test_the_script_computes_the_same_objective_for_other_targets": 1,
    "tests/core/test_hostile_models.py::test_the_script_says_what_is_wrong_in_one_line": 1,
    "tests/core/test_hostile_models.py::test_visualize_refuses_what_cannot_fit_before_allocating_it": 1,
    "tests/core/test_hostile_models.py::test_scan_refuses_what_cannot_fit_before_reading_an_image": 1,
    "tests/core/test_visualize.py::test_the_objective_grows_at_least_five_fold_in_64_steps": 2,
    "tests/core/test_hostile_models.py::test_the_script_checks_its_device_as_the_app_does": 2,
}


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config, items):
    seen: dict[str, int] = {}
    for item in items:
        base = item.nodeid.split("[", 1)[0]
        keep = FIRST_CASES_ONLY.get(base)
        if keep is None or "[" not in item.nodeid:
            continue
        seen[base] = seen.get(base, 0) + 1
        if seen[base] > keep:
            item.add_marker(pytest.mark.slow)
