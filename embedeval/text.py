"""Plain-text helpers: sentence splitting (haystack building, corpus chunking) and the lexical
overlap of two texts by content-word lemmas (needle validation, pair files)."""

from __future__ import annotations

import hashlib
import importlib.util
import re
from collections import OrderedDict
from functools import lru_cache
from pathlib import Path

from lemminflect import getAllLemmas, getAllLemmasOOV

from syntok.segmenter import segment as _syntok_segment
from syntok.tokenizer import Tokenizer as _SyntokTokenizer

from embedeval.versions import package_version

#: Which splitter cut the sentences (recorded with built haystacks, so haystacks cut by another
#: splitter or version are rebuilt rather than reused).
SENTENCE_SPLITTER = f"syntok-{package_version('syntok')}/paragraphs"
_PARAGRAPH = re.compile(r"\n\s*\n")
_TOKENIZER = _SyntokTokenizer(replace_not_contraction=False)  # keeps "don't" as written
_SPLIT_CACHE: OrderedDict[bytes, tuple[str, ...]] = OrderedDict()
_SPLIT_CACHE_SIZE = 64


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text``, whitespace collapsed; blank lines always end a sentence.

    Each paragraph goes through syntok's rule-based segmenter (``syntok.segmenter.segment`` over
    ``syntok.tokenizer.Tokenizer`` tokens), which keeps abbreviations whole ("Mr. Darcy",
    "Dr. Watson", "e.g. this", "U.S. Army") and splits a full stop glued to the next sentence
    ("accelerating.We were" -> "accelerating." + "We were"). Sentences are cut from the text
    itself (by token offsets), so nothing but whitespace changes.

    Why syntok (measured on the 2-core project machine, see docs/corpus.md): splitting the 12
    default plays (1.88 M characters) takes 0.16-0.24 s with the old regex, 8.5 s with syntok fed
    paragraph by paragraph (56 s through ``syntok.segmenter.analyze``, whose offset padding is
    quadratic) and 42 s with pysbd 0.3.4, which also keeps "accelerating.We" glued unless its
    text-altering ``clean=True`` mode is on. The default haystack build (24 groups x 7 lengths,
    lengths 128..8192) takes 36 s with the regex and 45 s with syntok (1.25x), so syntok is used
    everywhere. Results are memoised per text (the last 64), so repeated builds split once.
    """
    key = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
    cached = _SPLIT_CACHE.get(key)
    if cached is None:
        cached = tuple(sentence for paragraph in _PARAGRAPH.split(text) for sentence in _paragraph_sentences(paragraph))
        _SPLIT_CACHE[key] = cached
        while len(_SPLIT_CACHE) > _SPLIT_CACHE_SIZE:
            _SPLIT_CACHE.popitem(last=False)
    else:
        _SPLIT_CACHE.move_to_end(key)
    return list(cached)


def _paragraph_sentences(paragraph: str) -> list[str]:
    """syntok's sentences of one paragraph, each cut from the paragraph and whitespace-collapsed."""
    if not paragraph.strip():
        return []
    sentences = []
    for tokens in _syntok_segment(_TOKENIZER.tokenize(paragraph)):
        first, last = tokens[0], tokens[-1]
        sentence = " ".join(paragraph[first.offset - len(first.spacing): last.offset + len(last.value)].split())
        if sentence:
            sentences.append(sentence)
    return sentences



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


@lru_cache(maxsize=1)
def stop_words() -> frozenset[str]:
    """scikit-learn's English stop words, read from their own file in the installed scikit-learn
    (``sklearn/feature_extraction/_stop_words.py``) without importing the package, which takes a
    second or more (every needle validation asks for them); through the package where that file
    is not found."""
    sklearn = importlib.util.find_spec("sklearn")  # found, not imported
    for folder in (sklearn.submodule_search_locations or []) if sklearn else []:
        path = Path(folder) / "feature_extraction" / "_stop_words.py"
        spec = importlib.util.spec_from_file_location("embedeval._sklearn_stop_words", path)
        if path.is_file() and spec is not None:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return frozenset(module.ENGLISH_STOP_WORDS)
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    return frozenset(ENGLISH_STOP_WORDS)


def content_words(text: str) -> list[str]:
    """The lowercased word tokens (``[a-z0-9]+``) of ``text`` that are not English stop words
    (scikit-learn's list), in order of first appearance, each once."""
    words = (w for w in _WORD.findall(text.lower()) if w not in stop_words())
    return list(dict.fromkeys(words))


#: A word with its apostrophe parts (``don't``, ``they’ve``, ``Graham's``), letters only.
_TERM = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)*")  # letter words in any script: café, straße, москва whole
#: What follows the apostrophe of a possessive (kept as its word: ``graham's`` -> ``graham``); any
#: other ending (``n't``, ``'ve``, ``'re``, ``'ll``, ``'d``, ``'m``) makes a contraction of function
#: words, which names no topic.
_POSSESSIVE = "s"


def topic_terms(text: str) -> list[str]:
    """The words of ``text`` a topic can be named by, lowercased, in order (repeats kept, for
    counting): letter words of two letters or more in any script (``café``, not ``caf``), English
    stop words (scikit-learn's list) out.
    Contractions are read whole, so none leaves a fragment behind (``don't``, ``aren't``,
    ``they've``, ``we'll`` are dropped, not cut into ``don``, ``aren``, ``ve``, ``ll``); a
    possessive counts as its word (``graham's`` -> ``graham``; ``it's`` -> ``it``, a stop word)."""
    terms = []
    for word in _TERM.findall(text.lower()):
        base, *rest = re.split(r"['’]", word)
        if rest and rest != [_POSSESSIVE]:
            continue
        if len(base) > 1 and base not in stop_words():
            terms.append(base)
    return terms


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
