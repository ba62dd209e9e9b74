"""The hook kinds and the words people use for them: one vocabulary for the tree's columns, the Python API, the
command line and the docs. No torch here, so that the command line's parsers can read it.

The words are the tree's columns, in their order: ``in`` (what goes into a module: a forward pre-hook), ``act``
(what it computes: a forward hook), ``grad`` (the gradient of its output: a tensor hook on the output), ``grad_in``
(the gradient of its input: a full backward hook). The engine's kinds name the hook each uses; ``backward`` (a full
backward hook's ``grad_output``) is a kind with no column.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from hookscope.core.common.errors import HookscopeError

HookKind = Literal["forward", "pre", "backward", "tensor", "grad_input"]
KINDS: tuple[HookKind, ...] = ("forward", "pre", "backward", "tensor", "grad_input")

# The words, in the tree's column order, and the kind each ticks.
HOOK_WORDS: dict[str, HookKind] = {"in": "pre", "act": "forward", "grad": "tensor", "grad_in": "grad_input"}
WORD_OF_KIND: dict[str, str] = {kind: word for word, kind in HOOK_WORDS.items()}
# Every kind in the tree's column order, the kind with no column last.
COLUMN_ORDER: tuple[HookKind, ...] = (
    *HOOK_WORDS.values(),
    *(kind for kind in KINDS if kind not in HOOK_WORDS.values()),
)


def kinds_of_words(words: Iterable[str], what: str = "Hook words") -> tuple[HookKind, ...]:
    """The kinds of ``words`` (``act``, ``grad``...; an engine kind such as ``forward`` is taken as it is), each once,
    in the tree's column order; ``HookscopeError`` naming the words that are not."""
    given = [str(word).strip().lower() for word in words]
    unknown = [word for word in given if word not in HOOK_WORDS and word not in KINDS]
    if unknown or not given:
        raise HookscopeError(
            f"{what} are {', '.join(HOOK_WORDS)}; got {', '.join(repr(w) for w in unknown) or 'none'}."
        )
    kinds = {HOOK_WORDS.get(word, word) for word in given}
    return tuple(kind for kind in COLUMN_ORDER if kind in kinds)
