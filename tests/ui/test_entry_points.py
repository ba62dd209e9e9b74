"""The command-line entry points of the window: --screenshot and --self-test, through run_gui itself."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtGui import QImage

from hookscope.core.common.errors import HookscopeError
from hookscope.ui.app import SCREENSHOT_SIZE, SELF_TEST_REPORT_ENV, run_gui


def test_screenshot_writes_a_png_of_the_whole_window(tmp_path: Path, qapp) -> None:
    out = tmp_path / "shots" / "window.png"
    assert run_gui(None, None, "none", "cpu", str(out), ["layer2.0.conv1"], False) == 0
    image = QImage(str(out))
    assert not image.isNull()
    assert (image.width(), image.height()) == SCREENSHOT_SIZE


def test_screenshot_with_an_unknown_module_is_a_clear_error(tmp_path: Path, qapp) -> None:
    with pytest.raises(HookscopeError, match="no_such_layer"):
        run_gui(None, None, "none", "cpu", str(tmp_path / "x.png"), ["no_such_layer"], False)
    assert not (tmp_path / "x.png").exists()


def test_screenshot_with_a_broken_image_is_a_clear_error(tmp_path: Path, qapp) -> None:
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not a picture")
    with pytest.raises(HookscopeError, match="broken.jpg"):
        run_gui(str(broken), None, "none", "cpu", str(tmp_path / "x.png"), None, False)


def test_self_test_passes_and_writes_its_report(tmp_path: Path, qapp, monkeypatch, capsys) -> None:
    report = tmp_path / "self-test.txt"
    monkeypatch.setenv(SELF_TEST_REPORT_ENV, str(report))
    assert run_gui(None, None, "default", "cpu", None, None, True) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("hookscope self-test: ok")
    assert report.read_text().strip() == line


def test_screenshot_at_a_size_with_the_columns_asked_for(tmp_path: Path, qapp, monkeypatch) -> None:
    from hookscope.ui import app as app_module

    seen: dict = {}
    original = app_module.make_window

    def spy(*args, **options):  # the real window; remember what it ticked
        window = original(*args, **options)
        window.run_finished.connect(lambda: seen.setdefault("pairs", window.workspace.ticked_pairs()))
        return window

    monkeypatch.setattr(app_module, "make_window", spy)
    out = tmp_path / "small.png"
    assert (
        run_gui(
            None, None, "none", "cpu", str(out), ["layer2.0.conv1"], False, size="1024x700", ticks="in,grad,grad_in"
        )
        == 0
    )
    image = QImage(str(out))
    assert (image.width(), image.height()) == (1024, 700)
    assert seen["pairs"] == {("layer2.0.conv1", "pre"), ("layer2.0.conv1", "tensor"), ("layer2.0.conv1", "grad_input")}


@pytest.mark.parametrize("size, ticks", [("1024", None), ("10x10", None), (None, "act,weights")])
def test_a_bad_size_or_ticks_is_one_clear_error(tmp_path: Path, qapp, size, ticks) -> None:
    with pytest.raises(HookscopeError, match="--size|--hooks"):
        run_gui(None, None, "none", "cpu", str(tmp_path / "x.png"), None, False, size=size, ticks=ticks)


def test_ticks_name_the_trees_columns_in_their_order(capsys) -> None:
    """--hooks: in, act, grad (a tensor hook on the output), grad_in (grad_input, a full backward hook): the words of
    export's --hooks; grad_out (a full backward hook's grad_output) ticks the Grad column that shows it."""
    from hookscope.ui.app import parse_ticks

    assert parse_ticks("grad_in,act") == ("forward", "grad_input")
    assert parse_ticks("grad, in") == ("pre", "tensor")
    assert parse_ticks("grad_out,act") == ("forward", "tensor")
    assert capsys.readouterr().err == ""
    assert parse_ticks("forward,tensor") == ("forward", "tensor")  # the old spellings: still taken, said once
    assert capsys.readouterr().err == (
        "hookscope: warning: --hooks: 'forward' is now 'act' and 'tensor' is now 'grad'; the old words still work, "
        "for now.\n"
    )
    with pytest.raises(HookscopeError, match="--hooks takes a list of in, act, grad, grad_in"):
        parse_ticks("weights")
