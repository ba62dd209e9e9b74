"""Leaf views that never see the window: module tree, panel area and panels, channel view, input, predictions."""
