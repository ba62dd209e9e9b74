"""A banner above the panels when a run's numbers broke down: NaN or inf in the output or the input gradient
(``NumericHealthFeature``, id "numeric_health").

Without it, a model with NaN weights looks like an untrained one: the pictures draw NaN as 0, the gradients come out
"all zero", and the top-5 ranks nothing. The banner says what is wrong in the engine's sentence
(``app/hookscope/core/engine/numeric.py``: which weights hold NaN or inf, or that they are finite and the values overflowed on the
way), and goes when a run comes back finite or another model loads.

Only the run's small tensors (class scores, input gradient) are checked on the GUI thread after each run; the
weights (a pass over every parameter) only when those are not finite, and then once per model.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Qt
from PySide6.QtWidgets import QLabel

from hookscope.core.engine.numeric import count_non_finite, numeric_report
from hookscope.ui.host import Host
from hookscope.ui.state.requests import LoadOutcome, RunOutcome
from hookscope.ui.state.workspace import Workspace


class NumericHealthFeature(QObject):
    """Shows what is not finite after a run whose output or input gradient holds NaN or inf."""

    id = "numeric_health"

    def __init__(self, workspace: Workspace, host: Host) -> None:
        super().__init__(workspace)
        self.workspace = workspace
        self.host = host
        self.banner = QLabel("")
        self.banner.setObjectName("notice")
        self.banner.setWordWrap(True)
        self.banner.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.banner.setVisible(False)
        host.add_notice_row(self.banner)
        workspace.run_applied.connect(self._on_run_applied)
        workspace.model_changed.connect(self._on_model_changed)

    @property
    def text(self) -> str:
        """What the banner says ("" while hidden)."""
        return self.banner.text() if not self.banner.isHidden() else ""

    def _on_run_applied(self, outcome: RunOutcome) -> None:
        result, loaded = outcome.result, self.workspace.loaded
        small = (("output", result.scores), ("input gradient", result.input_grad))
        if loaded is None or not any(t is not None and count_non_finite(n, t) for n, t in small):
            self._show("")
            return
        line = numeric_report(loaded.module, result, records=False).line()
        self._show(line)
        self.host.show_status(line, 10000)

    def _on_model_changed(self, _outcome: LoadOutcome) -> None:
        self._show("")

    def _show(self, line: str) -> None:
        self.banner.setText(line)
        self.banner.setToolTip(line)
        self.banner.setVisible(bool(line))
