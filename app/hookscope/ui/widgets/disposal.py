"""Taking a widget out of the window: the one way every part of the window is removed (a record panel, a module
card, a dock, the scan strip's patches, the live view's keys, a window) (issue 48).

Why one way. PySide keeps a Python wrapper for each C++ object Python has been handed, in a table keyed by the
object's address, and drops it only when it learns that the object is gone: a QObject tells it, a layout item (the
``QWidgetItem`` Qt makes for a widget in a layout, the ``QSpacerItem`` of ``addStretch``) does not. PySide makes
wrappers over such items itself: ``addLayout``/``insertLayout`` of a layout that already holds items, onto a layout
inside a widget, walks those items and gives each a wrapper owned by the outer layout, and ``itemAt`` does the same.
It drops them again when an item leaves by ``removeWidget``/``removeItem``, or with the layout that owns them. An
item Qt frees any other way (its widget deleted or reparented while in the layout, an inner layout deleted with its
stretch) leaves its wrapper in the table; the next object Qt makes at that address comes to Python through the old
wrapper: a QMenu that says it is a ``QSpacerItem`` (pyqtgraph's ``PlotItem``, the window's memory loop), and a
crash where C++ touches it through the wrapper.

So, in ``hookscope.ui``:

* a widget leaves through ``dispose`` (for good) or ``detach`` (to be put elsewhere), which take it out of the
  layout that holds it by ``removeWidget`` first; no other module calls ``deleteLater``, ``setParent(None)``,
  ``takeAt`` or ``itemAt`` (``tests/ui/test_qt_wrappers.py`` reads the sources);
* an inner layout that is rebuilt (the panel page's rows) joins its outer layout while still empty, and is
  filled after: its items then never get a wrapper; it leaves through ``drop_layout``, which takes the wrappers
  its items have with it either way.
"""

from __future__ import annotations

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QBoxLayout, QFormLayout, QGridLayout, QLayout, QStackedLayout, QWidget
from shiboken6 import Shiboken

# The layouts the window builds. Qt's own (a dock's, a main window's) are left to their widgets.
_LAYOUTS = (QBoxLayout, QGridLayout, QFormLayout, QStackedLayout)


def _holding_layout(widget: QWidget) -> QLayout | None:
    """The layout that holds ``widget`` as one of its items: its parent's layout or one nested in it (nested
    layouts are QObject children of the layout they are in, so they are found without ``itemAt``)."""
    parent = widget.parentWidget()
    top = parent.layout() if parent is not None else None
    if top is None:
        return None
    for layout in (top, *top.findChildren(QLayout)):
        if isinstance(layout, _LAYOUTS) and layout.indexOf(widget) >= 0:
            return layout
    return None


def detach(widget: QWidget) -> None:
    """Take ``widget`` out of its layout and its parent, to be put elsewhere: the caller holds it meanwhile."""
    if not Shiboken.isValid(widget):
        return
    layout = _holding_layout(widget)
    if layout is not None:
        layout.removeWidget(widget)  # PySide lets go of the wrapper of its layout item, if it made one
    widget.setParent(None)


def dispose(obj: QObject | None) -> None:
    """Remove ``obj`` for good: a widget leaves the layout that holds it at once (``removeWidget``) and is hidden;
    Qt deletes it on the next turn of the event loop (``deleteLater``), so that the signal or event being handled
    that led here, and those already on their way, still find it. It keeps its parent until then: Qt owns it, and
    Python's last reference going away cannot free it in the middle of one of its own children's signals."""
    if obj is None or not Shiboken.isValid(obj):
        return
    if isinstance(obj, QWidget):
        layout = _holding_layout(obj)
        if layout is not None:
            layout.removeWidget(obj)
        obj.hide()
    obj.deleteLater()


def drop_layout(layout: QLayout) -> None:
    """Take an inner layout out of the layout that holds it and let it be freed as soon as the caller lets go of
    it (no parent: Python owns it then), with the items still in it (a stretch). Its widgets leave first, by
    ``removeWidget``, ``detach`` or ``dispose``: the layout does not own them."""
    if not Shiboken.isValid(layout):
        return
    # The wrappers PySide gave its items when it joined a layout filled (owned by the outer layout, they would
    # outlive the items): ``itemAt`` hands each to this layout, and ``removeItem`` lets go of this layout's.
    for index in range(layout.count()):
        layout.itemAt(index)
    outer = layout.parent()
    if isinstance(outer, QLayout):
        outer.removeItem(layout)
    layout.setParent(None)
