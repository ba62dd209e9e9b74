"""The hook kinds and the words people use for them: one table (``TERMS``) that the tree's columns, the panels'
titles, the export's file names, the manifest, sessions, the command line's options, the Python API and the docs all
read. No torch here, so that the command line's parsers can read it.

The words are the tree's columns, in their order: ``in`` (what goes into a module: a forward pre-hook), ``act``
(what it computes: a forward hook), ``grad`` (the gradient of its output: a tensor hook on the output), ``grad_in``
(the gradient of its input: a full backward hook), ``attn`` (an attention module's weights, batch x heads x queries
x keys: a forward pre-hook and a forward hook around a torch function mode, ``hookscope.core.engine.attention``; a
column only where the model has attention modules), then ``grad_out`` (a full backward hook's ``grad_output``: the
same values as ``grad``, through the other hook), which has no column. The engine's kinds (``HookKind``) name the
hook each uses; they are the engine's, and a person reads and types the words. The kinds were also accepted as
words before there was one vocabulary, and still are (``old_spellings`` finds them; the front ends say so once).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from hookscope.core.common.errors import HookscopeError

HookKind = Literal["forward", "pre", "backward", "tensor", "grad_input", "attention"]
KINDS: tuple[HookKind, ...] = ("forward", "pre", "backward", "tensor", "grad_input", "attention")


@dataclass(frozen=True)
class HookTerms:
    """Every name of one hook kind. ``files`` names what an export writes for it: ``FILES.npz`` and ``png/FILES/``
    (and the keys of a written script's ``--save``), ``title`` (its snake case) is a panel's title and the docs'
    name, ``column`` the tree's column header (None: no column), ``old_files`` what an export named its archive
    before one vocabulary (never written; an old manifest's ``archives`` name it)."""

    kind: HookKind
    word: str
    column: str | None
    title: str
    files: str
    old_files: str | None = None

    @property
    def archive(self) -> str:
        return f"{self.files}.npz"


# One row per kind, in the tree's column order; the kinds with no column last. A new kind is a new row.
TERMS: tuple[HookTerms, ...] = (
    HookTerms("pre", "in", "In", "Inputs", "inputs"),
    HookTerms("forward", "act", "Act", "Activations", "activations"),
    HookTerms("tensor", "grad", "Grad", "Gradients", "gradients", old_files="tensor_gradients"),
    HookTerms("grad_input", "grad_in", "Grad in", "Input gradients", "input_gradients"),
    HookTerms("attention", "attn", "Attn", "Attention", "attention"),
    HookTerms("backward", "grad_out", None, "Output gradients", "output_gradients", old_files="gradients"),
)
TERMS_OF_KIND: dict[str, HookTerms] = {terms.kind: terms for terms in TERMS}
TERMS_OF_WORD: dict[str, HookTerms] = {terms.word: terms for terms in TERMS}

# The words, in the tree's column order, and the kind each hooks.
HOOK_WORDS: dict[str, HookKind] = {terms.word: terms.kind for terms in TERMS}
WORD_OF_KIND: dict[str, str] = {terms.kind: terms.word for terms in TERMS}
# Every kind in the tree's column order, the kinds with no column last.
COLUMN_ORDER: tuple[HookKind, ...] = tuple(terms.kind for terms in TERMS)
# A kind with no column is shown in the window by the column that shows the same values: a session or --hooks
# with grad_out ticks Grad.
SHOWN_AS: dict[str, str] = {"backward": "tensor"}


def title_of(kind: str) -> str:
    """A kind's title ("Gradients"), the kind itself for one not in the table."""
    terms = TERMS_OF_KIND.get(kind)
    return terms.title if terms is not None else kind


def word_of(kind: str) -> str:
    """A kind's word (``grad``), the kind itself for one not in the table."""
    return WORD_OF_KIND.get(kind, kind)


def kind_of(name: str) -> HookKind | None:
    """The kind a saved file names: a word (what is written now) or a kind (what sessions and manifests wrote before
    one vocabulary); None for neither. (Not an archive's name: ``gradients.npz`` held ``grad_out`` before one
    vocabulary and holds ``grad`` now; a manifest's ``archives`` say which, keyed by word or kind.)"""
    name = str(name).strip().lower()
    terms = TERMS_OF_WORD.get(name) or TERMS_OF_KIND.get(name)
    return terms.kind if terms is not None else None


def old_spellings(words: Iterable[str]) -> list[str]:
    """The ``words`` that are kinds spelled the old way (``forward`` for ``act``), each once."""
    given = (str(word).strip().lower() for word in words)
    return list(dict.fromkeys(word for word in given if word not in HOOK_WORDS and word in TERMS_OF_KIND))


def deprecation_line(old: Iterable[str]) -> str:
    """One line about old spellings: "'forward' is now 'act' and 'backward' is now 'grad_out'; ..."."""
    said = " and ".join(f"'{word}' is now '{WORD_OF_KIND[word]}'" for word in old)
    return f"{said}; the old words still work, for now."


def words_text(separator: str = ",") -> str:
    """The words as an option lists them: ``in,act,grad,grad_in,attn,grad_out``."""
    return separator.join(HOOK_WORDS)


def kinds_in_order_given(words: Iterable[str], what: str = "Hook words") -> tuple[HookKind, ...]:
    """The kinds of ``words`` (``act``, ``grad``...; an old spelling, the kind itself, is taken too), each once, in
    the order given; ``HookscopeError`` naming the words that are neither."""
    given = [str(word).strip().lower() for word in words]
    unknown = [word for word in given if word not in HOOK_WORDS and word not in TERMS_OF_KIND]
    if unknown or not given:
        raise HookscopeError(
            f"{what} are {', '.join(HOOK_WORDS)}; got {', '.join(repr(w) for w in unknown) or 'none'}."
        )
    return tuple(dict.fromkeys(HOOK_WORDS[word] if word in HOOK_WORDS else TERMS_OF_KIND[word].kind for word in given))


def kinds_of_words(words: Iterable[str], what: str = "Hook words") -> tuple[HookKind, ...]:
    """``kinds_in_order_given``, in the tree's column order."""
    kinds = set(kinds_in_order_given(words, what))
    return tuple(kind for kind in COLUMN_ORDER if kind in kinds)
