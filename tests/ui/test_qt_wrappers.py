"""Qt objects and their Python wrappers (issue 48): no wrapper outlives the object Qt made it for.

A layout item (a widget's ``QWidgetItem``, an ``addStretch`` spacer) is no QObject: when Qt frees one PySide is not
told, and a wrapper PySide made for it stays in its table under the freed address, handed out later for whatever
Qt makes there (the window's memory loop got a ``QSpacerItem`` where pyqtgraph asked for a new QMenu). PySide makes
such wrappers when a filled layout joins a layout in a widget, and on ``itemAt``; the panel page made one per stretch
and per card each time it flowed its cards into rows. ``hookscope/ui/widgets/disposal.py`` holds the rules; here
they are checked on the real widgets, with a real Qt application (offscreen).
"""

from __future__ import annotations

import random
import re
from pathlib import Path

from conftest import stale_layout_items
from PySide6.QtCore import QCoreApplication, QEvent
from PySide6.QtWidgets import QApplication, QHBoxLayout, QLabel, QMenu, QVBoxLayout, QWidget
from shiboken6 import Shiboken

import hookscope.ui
from hookscope.core.pictures.panels import PanelSettings
from hookscope.ui.widgets.disposal import detach, dispose, drop_layout
from hookscope.ui.widgets.panel_area import PanelArea

PATHS = [f"block{n}" for n in range(6)]
KINDS = ("forward", "tensor")


def _deferred_deletes() -> None:
    QApplication.processEvents()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)


def _menus_come_back_as_menus(count: int = 30) -> None:
    """What Qt makes for Python is handed over as itself, not through a stale wrapper at the same address
    (``QMenu.addMenu`` makes its menu in C++, as pyqtgraph's plots do when a panel draws bars)."""
    probe = QMenu()
    for n in range(count):
        menu = probe.addMenu(f"probe {n}")
        assert type(menu) is QMenu and Shiboken.isValid(menu), f"addMenu gave back a {type(menu).__name__}"


def test_the_panel_page_flowed_again_and_again_leaves_no_wrapper_over_a_freed_item(qtbot) -> None:
    """Panels ticked and unticked at random, the page narrowed and widened (the cards flow into other rows, each
    flow rebuilds the rows): every layout-item wrapper left is over an item a layout holds, of its own kind."""
    area = PanelArea(PATHS.index)
    qtbot.addWidget(area)
    area.resize(1300, 800)
    area.show()
    rng = random.Random(48)
    every = [(path, kind) for path in PATHS for kind in KINDS]
    ticked: set[tuple[str, str]] = set()
    for turn in range(16):
        wanted = set(rng.sample(every, rng.randint(2, 6)))
        for pair in ticked - wanted:
            area.remove_pair(*pair)
        area.ensure_pairs(sorted(wanted - ticked), lambda _path, _kind: PanelSettings())
        ticked = wanted
        qtbot.waitUntil(lambda wanted=wanted: area.pairs() == wanted, timeout=10_000)
        area.resize(1300 if turn % 2 else 650, 800)
        _deferred_deletes()
        _menus_come_back_as_menus()
    assert {(panel.path, panel.kind) for card in area.cards() for panel in card.panels()} == ticked
    problems = stale_layout_items()
    assert not problems, f"{len(problems)} wrapper(s) over freed or other items:\n" + "\n".join(problems[:10])


def test_dispose_detach_and_drop_layout_take_the_wrappers_of_items_with_them(qtbot) -> None:
    """A row filled before it joined the page (so PySide wrapped its items): one label disposed of, one detached,
    then the row dropped with its stretch; no wrapper stays over any of their items."""
    page = QWidget()
    qtbot.addWidget(page)
    outer = QVBoxLayout(page)
    row = QHBoxLayout()
    labels = [QLabel(f"label {n}") for n in range(3)]
    for label in labels:
        row.addWidget(label)
    row.addStretch(1)
    outer.addLayout(row)
    page.show()
    gone, moved, kept = labels
    dispose(gone)
    detach(moved)
    assert not gone.isVisible() and row.indexOf(gone) < 0 and row.indexOf(moved) < 0 and moved.parent() is None
    _deferred_deletes()
    assert not Shiboken.isValid(gone) and Shiboken.isValid(moved)  # Qt freed one; Python holds the other
    assert stale_layout_items() == []
    row.removeWidget(kept)
    drop_layout(row)
    del row
    _deferred_deletes()
    assert outer.count() == 0
    assert stale_layout_items() == []
    _menus_come_back_as_menus()


# ---- the rule, in the sources -----------------------------------------------------------------------------------

UI = Path(hookscope.ui.__file__).parent
HELPER = UI / "widgets" / "disposal.py"
# QObjects of the thread pool's workers (a worker's signals, its relays), not widgets: deleted on the GUI thread
# after the signals on their way, as that module explains; no layout holds them.
NOT_WIDGETS = {UI / "state" / "worker.py"}
BY_HAND = re.compile(r"\.deleteLater\(|\.setParent\(None\)|\.takeAt\(|\.itemAt\(|Shiboken\.delete\(")


def test_no_ui_module_takes_widgets_apart_by_hand() -> None:
    """Every widget of the window leaves through ``hookscope.ui.widgets.disposal`` (``dispose``, ``detach``,
    ``drop_layout``): one place that takes it out of its layout by ``removeWidget`` and schedules its deletion
    the same way; ``takeAt``/``itemAt`` would wrap layout items that Qt frees."""
    found = []
    for path in sorted(UI.rglob("*.py")):
        if path == HELPER or path in NOT_WIDGETS:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if BY_HAND.search(code):
                found.append(f"{path.relative_to(UI.parent)}:{number}: {line.strip()}")
    assert not found, "taken apart by hand (use hookscope.ui.widgets.disposal):\n" + "\n".join(found)
    assert BY_HAND.search(HELPER.read_text(encoding="utf-8"))  # the rule's one place, where the pattern lives
