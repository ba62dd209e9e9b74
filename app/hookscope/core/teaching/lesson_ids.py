"""The hook lessons' ids, in their order, without torch: ``hookscope lessons --help`` counts them while its parser
is built, before anything heavy loads. The lessons themselves are ``hookscope.core.teaching.lessons.LESSONS`` (which
imports torch); tests/core/test_cli_help.py keeps the two alike.
"""

from __future__ import annotations

LESSON_IDS: tuple[str, ...] = (
    "forward-export",
    "forward-mixup",
    "pre-double",
    "backward-grad-input",
    "backward-deprecated",
    "tensor-scale",
    "tensor-mean",
    "handle-remove",
    "pitfalls",
)
