"""Griffe extension (mkdocstrings, the Python API reference): the docstrings' Sphinx roles as plain code.

The code's docstrings name other objects the Sphinx way, ``:class:`Preprocess``` or ``:func:`read_image```; the
reference renders Markdown, where the role would show as ":class:" before the name. Each role becomes a code
span of the name (``Preprocess``), which is what a reader of the source sees too.
"""

from __future__ import annotations

from typing import Any

import griffe

from hookscope.core.teaching.guide import plain_roles  # the window's guide writes the roles the same way


class SphinxRoles(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = plain_roles(obj.docstring.value)
