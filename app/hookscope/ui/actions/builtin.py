"""The window's own actions: images, hooks, view settings for all panels, help. Features add theirs."""

from __future__ import annotations

import os
from functools import partial
from typing import Protocol

from PySide6.QtCore import QStandardPaths, Qt, QUrl
from PySide6.QtGui import QDesktopServices, QKeySequence
from PySide6.QtWidgets import QFileDialog, QMenu, QMessageBox, QWidget

from hookscope.core.common.resources import COLORMAPS, sample_image
from hookscope.core.models.images import IMAGE_SUFFIXES
from hookscope.core.pictures.panels import SCALINGS
from hookscope.core.teaching.guide import BUILD_HINT, find_guide, guide_pages
from hookscope.ui.actions.specs import ActionSpec
from hookscope.ui.dialogs.about import show_about
from hookscope.ui.dialogs.folders import last_folder, remember_folder
from hookscope.ui.state.settings import app_settings
from hookscope.ui.state.workspace import Workspace
from hookscope.ui.widgets.guide_browser import show_guide

Key = QKeySequence.StandardKey
HOOKS_HELP = """<b>The hooks behind the ticks</b><br><br>
<b>In</b>: <code>register_forward_pre_hook</code> sees what goes into a module.<br>
<b>Act</b>: <code>register_forward_hook</code> sees a module's output: the feature maps.<br>
<b>Grad</b>: <code>Tensor.register_hook</code> on the module's output (put there by a forward hook) sees the gradient
of the target score with respect to that output, shown as |grad| per channel. A tensor hook sits on the tensor
itself, so it stays exact where an in-place operation follows (ResNet's <code>bn1</code> before an in-place ReLU) and
it sees a <i>Scale gradient</i> edit on the same module.<br>
<b>Grad in</b>: <code>register_full_backward_hook</code> sees <code>grad_input</code>, the gradient with respect to
the module's inputs: only a full backward hook gives it. Where it cannot work (an in-place operation), tensor hooks on
the input tensors are used instead; the tree's tooltip says which.<br><br>
Every tick is a real hook on the live model, and every untick removes it. Hooks &gt; Hook inspector lists every
live handle with the plain PyTorch that registers it."""
LAST_FOLDER_KEY = "last_image_folder"
SCREENSHOT_FOLDER = "screenshots"  # where the last window screenshot was saved (the images' folder at first)
NO_GUIDE = f"""<b>The user guide is not part of this installation.</b><br><br>
The installer ships it (Help &gt; User guide opens it offline). In a source checkout, build it with
<code>{BUILD_HINT}</code>; its pages are also readable as Markdown in the checkout's <code>docs/</code> folder,
starting from <code>README.md</code>."""


class Shell(Protocol):
    """What the built-in actions need of the window (the shell passes itself)."""

    workspace: Workspace
    remembers: bool

    def open_files(self, paths: list[str]) -> None: ...

    def paste_image(self) -> None: ...

    def save_screenshot(self, path: str) -> bool: ...

    def show_error(self, message: str, dialog: bool = True) -> None: ...

    def show_status(self, message: str, msecs: int = 5000) -> None: ...

    def recent_files(self) -> list[str]: ...

    def close(self) -> bool: ...

    def focus_filter(self) -> None: ...

    def dialog_parent(self) -> QWidget: ...


def image_folder(remembers: bool) -> str:
    """Where the Open dialog starts: the last folder used, else the user's Pictures folder, else home; never the
    folder of the bundled sample (inside the installation)."""
    if remembers:
        last = app_settings().value(LAST_FOLDER_KEY)
        if isinstance(last, str) and os.path.isdir(last):
            return last
    pictures = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.PicturesLocation)
    return pictures if pictures and os.path.isdir(pictures) else os.path.expanduser("~")


def open_image_dialog(shell: Shell) -> None:
    patterns = " ".join(f"*{suffix}" for suffix in sorted(IMAGE_SUFFIXES))
    paths, _ = QFileDialog.getOpenFileNames(
        shell.dialog_parent(), "Open images", image_folder(shell.remembers), f"Images ({patterns});;All files (*)"
    )
    if paths:
        if shell.remembers:
            app_settings().setValue(LAST_FOLDER_KEY, os.path.dirname(paths[0]))
        shell.open_files(paths)


def screenshot_dialog(shell: Shell) -> None:
    start = os.path.join(
        last_folder(SCREENSHOT_FOLDER, shell.remembers, image_folder(shell.remembers)), "hookscope.png"
    )
    path, _ = QFileDialog.getSaveFileName(shell.dialog_parent(), "Save window screenshot", start, "PNG (*.png)")
    if path:
        remember_folder(SCREENSHOT_FOLDER, path, shell.remembers)
        if not shell.save_screenshot(path):
            shell.show_error(f"Could not write '{path}'.")


def recent_images(shell: Shell, menu: QMenu) -> None:
    sample = os.path.abspath(sample_image())
    recent = [path for path in shell.recent_files() if os.path.abspath(path) != sample]
    for path in recent:
        menu.addAction(path).triggered.connect(lambda *_, p=path: shell.open_files([p]))
    if not recent:
        menu.addAction("No recent images").setEnabled(False)


def inform(parent: QWidget, title: str, text: str) -> None:
    box = QMessageBox(QMessageBox.Icon.Information, title, text, parent=parent)
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    box.open()


def open_user_guide(shell: Shell) -> None:
    """Help > User guide: the guide's Markdown pages in the window's own guide viewer (every installation ships
    them, so nothing depends on the desktop having a program for Markdown or a browser); where they are missing,
    the built site in the desktop's browser (an older bundle), else a note on where to find the guide."""
    pages = guide_pages()
    if pages is not None:
        window = show_guide(pages, shell.dialog_parent())
        shell.show_status(f"User guide: {window.page.source().toLocalFile()}", 10000)
        return
    guide = find_guide()
    if guide is None:
        inform(shell.dialog_parent(), "User guide", NO_GUIDE)
        return
    if not QDesktopServices.openUrl(QUrl.fromLocalFile(str(guide.path))):
        shell.show_error(f"Could not open the user guide: no program opens '{guide.path}' on this desktop.")
        return
    shell.show_status(guide.note, 10000)


# long because: one table: the window's built-in actions, one entry each
def builtin_actions(shell: Shell) -> list[ActionSpec]:
    space = shell.workspace
    specs = [
        ActionSpec(
            "file.open_image",
            "Open image…",
            "File",
            lambda: open_image_dialog(shell),
            group=10,
            order=10,
            shortcut=Key.Open,
            tooltip="Open one or more image files",
            toolbar=True,
        ),
        ActionSpec(
            "file.paste_image", "Paste image", "File", shell.paste_image, group=10, order=20, shortcut=Key.Paste
        ),
        ActionSpec(
            "file.recent_images",
            "Recent images",
            "File",
            group=10,
            order=30,
            populate=lambda menu: recent_images(shell, menu),
        ),
        ActionSpec(
            "file.previous_image",
            "◀ Previous image",
            "File",
            lambda: space.step_image(-1),
            group=20,
            order=10,
            shortcut="PgUp",
            tooltip="The previous image of the list",
            toolbar=True,
        ),
        ActionSpec(
            "file.next_image",
            "Next image ▶",
            "File",
            lambda: space.step_image(1),
            group=20,
            order=20,
            shortcut="PgDown",
            tooltip="The next image of the list",
            toolbar=True,
        ),
        ActionSpec("file.screenshot", "Save window screenshot…", "File", lambda: screenshot_dialog(shell), group=80),
        ActionSpec("file.quit", "Quit", "File", shell.close, group=99, shortcut=Key.Quit),
        ActionSpec("hooks.untick_all", "Untick all", "Hooks", space.untick_all, group=10, order=10),
        ActionSpec(
            "hooks.filter", "Filter modules", "Hooks", shell.focus_filter, group=10, order=20, shortcut=Key.Find
        ),
        ActionSpec("hooks.run_again", "Run again", "Hooks", space.run_again, group=10, order=30, shortcut="F5"),
        ActionSpec(
            "help.guide",
            "User guide",
            "Help",
            lambda: open_user_guide(shell),
            group=10,
            order=10,
            shortcut=Key.HelpContents,
            tooltip="Open the user guide (offline, in a window of its own)",
        ),
        ActionSpec(
            "help.hooks",
            "The hooks behind the ticks",
            "Help",
            lambda: inform(shell.dialog_parent(), "Hooks", HOOKS_HELP),
            group=10,
        ),
        ActionSpec("help.about", "About Hookscope", "Help", lambda: show_about(shell.dialog_parent()), group=90),
    ]
    for field, title, choices in (
        ("colormap", "Colormap (all panels)", {name: name for name in COLORMAPS}),
        ("scaling", "Scaling (all panels)", SCALINGS),
        ("sort", "Channel order (all panels)", {"none": "channel order", "mean": "by mean", "max": "by max"}),
    ):
        menu = f"View/{title}"
        specs.append(ActionSpec(menu, title, "View", group=10, order=len(specs)))
        specs += [
            ActionSpec(f"view.{field}.{key}", label, menu, partial(space.set_all, field, key), order=n)
            for n, (key, label) in enumerate(choices.items())
        ]
    return specs
