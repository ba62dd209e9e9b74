"""The desktop window: PySide6 and pyqtgraph views on the Qt-free engine in ``hookscope.core``."""
