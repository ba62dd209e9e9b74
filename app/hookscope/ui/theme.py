"""One dark theme for the whole window: colormapped pictures read best on a dark background."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication

WINDOW = "#25282e"
BASE = "#1c1f24"
PANEL = "#2c3038"
PLOT_BACKGROUND = "#16181c"
BORDER = "#3b404a"
TEXT = "#e8eaed"
MUTED = "#9aa0aa"
ACCENT = "#3d8fd6"
WARNING_BG = "#5c4a16"
WARNING_TEXT = "#ffe9a8"
ERROR_TEXT = "#ff9b8f"
# The Grad column's chip keeps the gradients' orange now that it is a tensor hook; a full backward hook's
# grad_output (--hooks backward) is purple, grad_input (the Grad in column) rose.
KIND_COLORS = {
    "pre": "#3f9a6b",
    "forward": "#3d7fc2",
    "tensor": "#c7772e",
    "backward": "#a35fc0",
    "grad_input": "#c2506e",
}

STYLE = f"""
QToolTip {{ color: {TEXT}; background: {PANEL}; border: 1px solid {BORDER}; padding: 4px; }}
QDockWidget::title {{ background: {PANEL}; padding: 5px 8px; }}
QDockWidget {{ titlebar-close-icon: none; }}
QFrame#recordPanel {{ background: {PANEL}; border: 1px solid {BORDER}; border-radius: 4px; }}
QFrame#recordPanel[current="true"] {{ border: 1px solid {ACCENT}; }}
QLabel#panelTitle {{ font-weight: 600; }}
QLabel#muted, QLabel#panelFooter {{ color: {MUTED}; }}
QLabel#kindChip {{ color: white; border-radius: 3px; padding: 1px 6px; font-size: 11px; font-weight: 600; }}
QLabel#notice, QFrame#notice {{ background: {WARNING_BG}; color: {WARNING_TEXT}; border: 1px solid #8a6d1e;
                                border-radius: 4px; padding: 6px 10px; }}
QFrame#notice QLabel {{ color: {WARNING_TEXT}; background: transparent; border: none; padding: 0; }}
QLabel#emptyHint {{ color: {MUTED}; font-size: 15px; }}
QFrame#predictionRow {{ border: 1px solid transparent; border-radius: 3px; }}
QFrame#predictionRow:hover {{ background: {PANEL}; border: 1px solid {BORDER}; }}
QFrame#predictionRow[target="true"] {{ background: #203549; border: 1px solid {ACCENT}; }}
QProgressBar {{ border: 1px solid {BORDER}; border-radius: 2px; background: {BASE}; text-align: center;
                color: {TEXT}; max-height: 14px; font-size: 11px; }}
QProgressBar::chunk {{ background: {ACCENT}; }}
QStatusBar QLabel {{ color: {MUTED}; padding: 0 6px; }}
QToolButton#closePanel {{ border: none; color: {MUTED}; font-size: 14px; padding: 0 4px; }}
QToolButton#closePanel:hover {{ color: white; background: #a33; border-radius: 3px; }}
QComboBox {{ padding: 1px 6px; }}
QToolButton#choice {{ border: 1px solid {BORDER}; border-radius: 3px; padding: 1px 6px; background: {BASE}; }}
QToolButton#choice:hover {{ border: 1px solid {ACCENT}; }}
QToolButton#choice:disabled {{ color: #6c717a; }}
"""


def configure_pyqtgraph() -> None:
    """Row-major images (numpy's own layout, no transposes) and the theme's plot colours."""
    pg.setConfigOptions(imageAxisOrder="row-major", background=PLOT_BACKGROUND, foreground=MUTED, antialias=False)


def apply_theme(app: QApplication) -> None:
    app.setStyle("Fusion")
    palette = QPalette()
    roles = {
        QPalette.ColorRole.Window: WINDOW,
        QPalette.ColorRole.WindowText: TEXT,
        QPalette.ColorRole.Base: BASE,
        QPalette.ColorRole.AlternateBase: PANEL,
        QPalette.ColorRole.ToolTipBase: PANEL,
        QPalette.ColorRole.ToolTipText: TEXT,
        QPalette.ColorRole.Text: TEXT,
        QPalette.ColorRole.Button: PANEL,
        QPalette.ColorRole.ButtonText: TEXT,
        QPalette.ColorRole.BrightText: "#ffffff",
        QPalette.ColorRole.Highlight: ACCENT,
        QPalette.ColorRole.HighlightedText: "#ffffff",
        QPalette.ColorRole.Link: ACCENT,
        QPalette.ColorRole.PlaceholderText: MUTED,
        QPalette.ColorRole.Mid: BORDER,
        QPalette.ColorRole.Dark: BASE,
    }
    for role, color in roles.items():
        palette.setColor(role, QColor(color))
    for role in (QPalette.ColorRole.Text, QPalette.ColorRole.WindowText, QPalette.ColorRole.ButtonText):
        palette.setColor(QPalette.ColorGroup.Disabled, role, QColor("#6c717a"))
    app.setPalette(palette)
    app.setStyleSheet(STYLE)
