"""Did a question's evidence reach the prompt, and in which layer (docs/memory-eval.md#evidence).

A captured request has three places memory can put a remembered turn (memory/assemble.py):
the ``window`` (every message before the question), the ``summary`` (the system block holding
``<conversation_summary>``) and the ``facts`` (the system block holding ``<user_memory>``).
An evidence turn counts as present in a layer when its text is there verbatim, or a
distinctive part of it: any run of ``SHINGLE`` consecutive words of it holding at least
``DISTINCT`` words that are not stopwords (a fact the memory model kept as a fragment, "Leeds
with my partner Sam", still counts; a common phrase such as "it was last week" does not).
Text is compared as lower-case words of any script, each Chinese or Japanese character a word
of its own (those scripts do not space words), so JSON escaping and punctuation do not
matter. A model that paraphrases in its summary is not credited: the
figure is a lower bound for the summary and facts layers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from bot.core.llm import ModelRequest, TextBlock

LAYERS: Final = ("window", "summary", "facts")
SHINGLE: Final = 5
DISTINCT: Final = 3
# Han, kana: one character a word; any other letters and digits in runs.
_CJK: Final = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_WORD: Final = re.compile(f"[{_CJK}]|[^\\W_{_CJK}]+")
STOPWORDS: Final = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "if",
        "of",
        "to",
        "in",
        "on",
        "at",
        "for",
        "with",
        "by",
        "from",
        "as",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "am",
        "i",
        "me",
        "my",
        "we",
        "our",
        "you",
        "your",
        "he",
        "she",
        "it",
        "its",
        "they",
        "them",
        "their",
        "this",
        "that",
        "these",
        "those",
        "so",
        "do",
        "did",
        "does",
        "have",
        "has",
        "had",
        "not",
        "no",
        "yes",
        "just",
        "very",
        "really",
        "too",
        "also",
        "about",
        "what",
        "when",
        "where",
        "who",
        "how",
        "which",
        "there",
        "here",
        "then",
        "than",
        "will",
        "would",
        "can",
        "could",
        "should",
        "t",
        "s",
        "m",
        "re",
        "ve",
        "ll",
        "d",
        "oh",
        "hey",
        "hi",
    ]
)


def words(text: str) -> list[str]:
    """Lower-case words of ``text`` (letters and digits of any script; a CJK character
    alone)."""
    return _WORD.findall(text.lower())


def _shingles(tokens: Sequence[str]) -> Iterable[tuple[str, ...]]:
    if len(tokens) <= SHINGLE:
        yield tuple(tokens)
        return
    for i in range(len(tokens) - SHINGLE + 1):
        part = tuple(tokens[i : i + SHINGLE])
        if sum(w not in STOPWORDS for w in part) >= DISTINCT:
            yield part


class _Layer:
    """A layer's words, read once for all the evidence looked for in it: its runs of
    ``SHINGLE`` words in a set (a fragment is one lookup), the words for shorter evidence."""

    def __init__(self, text: str) -> None:
        self.words = words(text)
        self.runs = {
            tuple(self.words[i : i + SHINGLE]) for i in range(len(self.words) - SHINGLE + 1)
        }

    def holds(self, needle: tuple[str, ...]) -> bool:
        if len(needle) == SHINGLE:
            return needle in self.runs
        n, haystack = len(needle), self.words
        return n > 0 and any(
            haystack[i] == needle[0] and tuple(haystack[i : i + n]) == needle
            for i in range(len(haystack) - n + 1)
        )


def present(evidence: str, layer_text: str) -> bool:
    """Whether ``evidence`` (or a distinctive part of it) is in ``layer_text``."""
    return _present(words(evidence), _Layer(layer_text))


def _present(evidence: Sequence[str], layer: _Layer) -> bool:
    return any(layer.holds(s) for s in _shingles(evidence))


def layer_texts(request: ModelRequest) -> dict[str, str]:
    """The request's text by layer: window messages, summary block, user-memory block."""
    system = [b.text for b in request.system]
    window = "\n".join(
        b.text for m in request.messages[:-1] for b in m.blocks if isinstance(b, TextBlock)
    )
    return {
        "window": window,
        "summary": "\n".join(t for t in system if "<conversation_summary>" in t),
        "facts": "\n".join(t for t in system if "<user_memory>" in t),
    }


@dataclass(frozen=True, slots=True)
class EvidenceFound:
    """For each evidence ref, the layers it was found in (empty: not in the prompt)."""

    by_ref: Mapping[str, tuple[str, ...]]

    @property
    def all_present(self) -> bool:
        """Every evidence turn reached the prompt (False when there is no evidence)."""
        return bool(self.by_ref) and all(self.by_ref.values())

    def to_json(self) -> dict[str, list[str]]:
        """JSON-ready form."""
        return {ref: list(layers) for ref, layers in self.by_ref.items()}


def find_evidence(
    request: ModelRequest, refs: Sequence[str], texts: Mapping[str, str]
) -> EvidenceFound:
    """Where each evidence turn (by ref, its text from ``texts``) is in the request."""
    layers = {name: _Layer(text) for name, text in layer_texts(request).items() if text}
    found = {}
    for ref in refs:
        text = texts.get(ref)
        said = [] if text is None else words(text)
        found[ref] = tuple(
            name for name in LAYERS if name in layers and _present(said, layers[name])
        )
    return EvidenceFound(found)
