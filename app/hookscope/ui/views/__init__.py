"""The window's own views, each bound to the ``Workspace`` by itself.

A view here holds one of the window's widgets (the module tree, the cards, the input, the predictions) and
subscribes to the workspace's signals with ``_on_<signal>`` handlers, as napari's Qt layer does with its model's
events: the window builds them and places their widgets, but never delivers a run to them. The targets that a
segmentation, detection or embedding model offers (a dragged region, a box, image B, a prompt) are a view of their
own (``task_targets``).
"""
