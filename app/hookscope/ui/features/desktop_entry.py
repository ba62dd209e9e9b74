"""Help > Add Hookscope to the applications menu (Linux): the same entry ``hookscope --install-desktop-entry``
writes (hookscope.system.desktop_entry), for people who never open a terminal. Shown on Linux only: Windows' installer
and the macOS .app put Hookscope in the Start menu and Applications themselves.
"""

from __future__ import annotations

import sys

from hookscope.core.common.errors import HookscopeError
from hookscope.system.desktop_entry import install_desktop_entry, uninstall_desktop_entry
from hookscope.ui.actions.specs import ActionSpec
from hookscope.ui.host import Host
from hookscope.ui.state.workspace import Workspace

FEATURE_ID = "desktop_entry"
INSTALL_ACTION = "help.desktop_entry"
REMOVE_ACTION = "help.remove_desktop_entry"


class DesktopEntryFeature:
    id = FEATURE_ID

    def __init__(self, workspace: Workspace, host: Host) -> None:
        self.workspace = workspace
        self.host = host
        if sys.platform.startswith("linux"):
            host.add_actions(
                [
                    ActionSpec(
                        INSTALL_ACTION,
                        "Add Hookscope to the applications menu",
                        "Help",
                        self.install,
                        group=80,
                        order=10,
                        tooltip="A menu entry that starts this copy of Hookscope and opens images",
                    ),
                    ActionSpec(
                        REMOVE_ACTION,
                        "Remove Hookscope from the applications menu",
                        "Help",
                        self.remove,
                        group=80,
                        order=20,
                    ),
                ]
            )

    def install(self) -> None:
        try:
            path = install_desktop_entry()
        except HookscopeError as error:
            self.host.show_error(str(error))
            return
        self.host.show_status(f"Hookscope is in your applications menu ({path}).", 8000)

    def remove(self) -> None:
        try:
            path = uninstall_desktop_entry()
        except HookscopeError as error:
            self.host.show_error(str(error))
            return
        self.host.show_status(
            "Hookscope's menu entry is removed." if path else "Hookscope had no entry in your applications menu.", 8000
        )
