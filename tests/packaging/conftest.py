"""packaging/ is not a Python package (its name would shadow PyPI's ``packaging``): load its checker by path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_bundle_checks() -> ModuleType:
    if "bundle_checks" in sys.modules:
        return sys.modules["bundle_checks"]
    spec = importlib.util.spec_from_file_location("bundle_checks", ROOT / "packaging" / "bundle_checks.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bundle_checks"] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def checks() -> ModuleType:
    return load_bundle_checks()
