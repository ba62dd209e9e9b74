"""The Attention panel on a real DINOv2-with-registers (issue 43, item 2): a tiny random ``Dinov2WithRegistersModel``
(4 registers) served from 127.0.0.1 as the Hub and opened by the workspace as the window opens ``hf:NAME``. The
Modules tree offers Attn on its two attention modules; the panel lays the class token's attention over the 4 x 4
patch grid, the class token and the 4 registers set aside, and a click on a patch makes that patch the query."""

from __future__ import annotations

import huggingface_hub
import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QWidget

from hookscope.ui.features.attention import AttentionFeature
from hookscope.ui.views.modules import ModulesView
from hookscope.ui.widgets.module_tree import ATTENTION
from tests.hub_server import HubServer, make_dinov2_with_registers, use_hub
from tests.loopback import serving

RUN_TIMEOUT_MS = 120_000
NAME = "tiny/dinoreg"
SIDE, PATCH, REGISTERS = 56, 14, 4
GRID, PREFIX = SIDE // PATCH, 1 + REGISTERS  # 4 x 4 patches after the class token and the registers
PATHS = [f"encoder.encoder.layer.{i}.attention" for i in range(2)]  # inside the app's image encoder


@pytest.fixture
def space(tmp_path, monkeypatch, qtbot):
    """The workspace with ``hf:tiny/dinoreg`` loaded and run, and the Modules dock's tree following it."""
    pytest.importorskip("transformers")
    from hookscope.ui.state.workspace import Workspace

    make_dinov2_with_registers(tmp_path / "repos" / NAME, SIDE, PATCH, REGISTERS)
    with serving(HubServer(tmp_path / "repos")) as server:
        use_hub(monkeypatch, server, tmp_path / "hf")
        space = Workspace(weights="default")
        space.attach_view(lambda: (300, 300))
        parent = QWidget()
        qtbot.addWidget(parent)
        modules = ModulesView(space, lambda: [], parent)  # the window's Modules dock, following the workspace
        try:
            with qtbot.waitSignal(space.run_applied, timeout=RUN_TIMEOUT_MS):
                space.start(f"hf:{NAME}", None)
            yield space, modules
        finally:
            space.shutdown()
            huggingface_hub.close_session()  # the client's kept-alive connections: the server's threads end


@pytest.fixture
def host(qtbot):
    from fakes import FakeHost

    fake = FakeHost()
    qtbot.addWidget(fake.parent)
    return fake


def test_the_tree_offers_attn_and_the_panel_sets_the_registers_aside(space, host, qtbot):
    space, modules = space
    tree = modules.model
    assert tree.has_attention and not modules.view.tree.isColumnHidden(ATTENTION)
    check = Qt.ItemDataRole.CheckStateRole
    for path in PATHS:
        box = tree.index_of(path, ATTENTION)
        assert box.data(check) is not None and box.flags() & Qt.ItemFlag.ItemIsUserCheckable, path
    assert tree.index_of("encoder.encoder.layer.0.mlp", ATTENTION).data(check) is None  # no box on the rest

    feature = AttentionFeature(space, host)
    with qtbot.waitSignal(space.run_applied, timeout=RUN_TIMEOUT_MS):
        assert feature.show_module(PATHS[1])  # ticks Attn: the hooks go on, a run follows
    assert space.registry.has(PATHS[1], "attention")
    weights = next(r.tensor for r in space.last.result.records if (r.kind, r.key) == ("attention", PATHS[1]))[0]
    assert weights.shape == (2, PREFIX + GRID * GRID, PREFIX + GRID * GRID)
    picture = feature.picture
    assert picture is not None and (picture.layout.prefix, picture.layout.height, picture.layout.width) == (
        PREFIX,
        GRID,
        GRID,
    )
    assert feature.query == 0 and "class token" in feature.query_label.text()
    rows = weights[:, 0, PREFIX:].reshape(2, GRID, GRID).numpy()  # the class token over the patch keys only
    np.testing.assert_allclose(picture.tiles, rows / rows.max(axis=(1, 2), keepdims=True), rtol=1e-5, atol=1e-7)

    height, width = feature._input.shape[:2]
    assert feature.click_input(width * 0.6, height * 0.9)  # the patch in row 3, column 2: a patch, not a register
    query = PREFIX + 3 * GRID + 2
    assert feature.query == query and "patch (row 3, column 2)" in feature.query_label.text()
    clicked = weights[:, query, PREFIX:].reshape(2, GRID, GRID).numpy()
    np.testing.assert_allclose(feature.picture.tiles, clicked / clicked.max(axis=(1, 2), keepdims=True), rtol=1e-5)
