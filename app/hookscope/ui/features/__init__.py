"""Features built from the workspace and a host: each contributes docks, actions and menu entries.

``FEATURES`` is the order the window builds them in (docks that tab with another come after it).
"""

from __future__ import annotations

from collections.abc import Callable

from hookscope.ui.features.attention import AttentionFeature
from hookscope.ui.features.desktop_entry import DesktopEntryFeature
from hookscope.ui.features.grad_cam import GradCamFeature
from hookscope.ui.features.image_b import ImageBFeature
from hookscope.ui.features.input_settings import InputSettingsFeature
from hookscope.ui.features.inspector import InspectorFeature
from hookscope.ui.features.interventions import InterventionsFeature
from hookscope.ui.features.lessons import LessonsFeature
from hookscope.ui.features.live import LiveFeature
from hookscope.ui.features.load_cancel import LoadCancelFeature
from hookscope.ui.features.numeric_health import NumericHealthFeature
from hookscope.ui.features.open_model import ModelFilesFeature
from hookscope.ui.features.scan import ScanFeature
from hookscope.ui.features.session_files import SessionFilesFeature
from hookscope.ui.features.visualize import VisualizeFeature
from hookscope.ui.features.weights_download import WeightsDownloadFeature

FEATURES: list[tuple[str, Callable]] = [
    ("weights_download", WeightsDownloadFeature),
    ("numeric_health", NumericHealthFeature),  # the NaN / inf banner above the panels
    ("sessions", SessionFilesFeature),  # before model files: a dropped session opens as a session
    ("model_files", ModelFilesFeature),
    ("load_cancel", LoadCancelFeature),  # Cancel for a model load that takes long (or never ends)
    ("input_settings", InputSettingsFeature),
    ("interventions", InterventionsFeature),
    ("inspector", InspectorFeature),  # tabbed with the interventions
    ("grad_cam", GradCamFeature),  # a side view: tabbed under the cards
    ("attention", AttentionFeature),  # a side view: tabbed under the cards, beside Grad-CAM
    ("image_b", ImageBFeature),
    ("visualize", VisualizeFeature),  # a side view: tabbed under the cards
    ("lessons", LessonsFeature),  # Help > Learn the hooks; a side view: tabbed under the cards
    ("desktop_entry", DesktopEntryFeature),  # Help > Add Hookscope to the applications menu (Linux)
    ("scan", ScanFeature),  # File > Scan a folder…; its Top images tabbed with the Channel view
    ("live", LiveFeature),  # File > Open video… / Open camera…: the frames through the run path, Space freezes
]
