"""Plain-text helpers: sentence splitting (haystack building, corpus chunking) and the lexical
overlap of two texts by content-word lemmas (needle validation, pair files)."""

from __future__ import annotations

import re
from functools import lru_cache

from lemminflect import getAllLemmas, getAllLemmasOOV
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[.!?][\"'’”)\]])\s+|\n\s*\n")


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text`` (split after . ! ? and at blank lines), whitespace collapsed."""
    sentences = (" ".join(part.split()) for part in _SENTENCE_END.split(text))
    return [s for s in sentences if s]


_WORD = re.compile(r"[a-z0-9]+")
#: Parts of speech tried for a word lemminflect's dictionary does not know (its rules need one).
_OOV_POS: tuple[str, ...] = ("NOUN", "VERB")


@lru_cache(maxsize=65536)
def lemmas(word: str) -> frozenset[str]:
    """Every lemma of ``word`` (lowercased) under any part of speech, by lemminflect.

    A word in lemminflect's dictionary gets all its dictionary lemmas (``getAllLemmas``:
    ``"writing"`` -> {writing, write}, ``"lives"`` -> {life, live}); an unknown word gets the
    lemmas of lemminflect's rules as a noun and as a verb (``getAllLemmasOOV``) plus the word
    itself, so a name always matches itself (``"dresden"`` -> {dresden}).
    """
    word = word.lower()
    found = {lemma for forms in getAllLemmas(word).values() for lemma in forms}
    if not found:
        found = {word} | {lemma for pos in _OOV_POS for forms in getAllLemmasOOV(word, pos).values() for lemma in forms}
    return frozenset(found)


def content_words(text: str) -> list[str]:
    """The lowercased word tokens (``[a-z0-9]+``) of ``text`` that are not English stop words
    (scikit-learn's list), in order of first appearance, each once."""
    words = (w for w in _WORD.findall(text.lower()) if w not in ENGLISH_STOP_WORDS)
    return list(dict.fromkeys(words))


def _shared_lemma(a: str, b: str) -> str | None:
    """The lemma reported for two overlapping words (``None`` if their lemma sets are disjoint):
    one of the words itself when it is a shared lemma (``writing``/``writing`` -> writing,
    ``write``/``wrote`` -> write), else the first shared lemma in sorted order
    (``cities``/``city`` -> city, ``ran``/``running`` -> run)."""
    shared = lemmas(a) & lemmas(b)
    if not shared:
        return None
    return next((w for w in (a, b) if w in shared), min(shared))


def lexical_overlap(question: str, needle: str) -> list[str]:
    """The lemmas shared by the content words of two texts, sorted.

    Two content words overlap when their lemma sets (:func:`lemmas`, every part of speech)
    intersect, so inflections match: ``writing``/``write``/``wrote``, ``studies``/``studied``,
    ``cities``/``city``, ``ran``/``running``. Each overlapping pair of words is reported once, by
    one shared lemma. An empty list means no content word in common.
    """
    needle_words = content_words(needle)
    found = {_shared_lemma(q, n) for q in content_words(question) for n in needle_words}
    return sorted(found - {None})
