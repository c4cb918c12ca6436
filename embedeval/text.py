"""Plain-text helpers: sentence splitting (haystack building, corpus chunking), and the words of a
text as every needle check compares them (:func:`normalise`, :func:`words`): the lexical overlap
of two texts by content-word lemmas (needle validation, pair files), whole-word search (a keyword
in its question, a character in its needle, a name or keyword anywhere in a corpus) and the
refusal of invisible characters and mixed-script words."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from functools import lru_cache

import regex
from fontTools import unicodedata as unicode_scripts
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



#: Function words only (articles, determiners and quantifiers, pronouns, auxiliaries and modals,
#: prepositions, conjunctions, question words, negation, pro-forms, conjunctive and degree adverbs)
#: and the question frame ``character(s)``: words a question and its needle may share without
#: sharing what either is about. Not scikit-learn's English list (:func:`stop_words`), which also
#: holds content words (fire, mill, fifty, back, find, call, system, bill, ...): a one-hop needle
#: repeating one of those repeats its question's topic. Words are normalised (:func:`normalise`),
#: so the list is casefolded and unaccented; contractions are read as their first word (``isn't``
#: -> ``is``, ``she'd`` -> ``she``, :func:`words`), and a possessive ``s`` written apart
#: (``Yuki 's``) is no word either.
FUNCTION_WORDS: frozenset[str] = frozenset("""
    a an the this that these those some any each every either neither no none all both half such another other
    few many much more most several enough less least
    i me my mine myself you your yours yourself yourselves he him his himself she her hers herself it its itself
    we us our ours ourselves they them their theirs themselves one's oneself
    someone somebody something anyone anybody anything everyone everybody everything nobody nothing noone
    who whom whose which what where when why how whoever whomever whatever whichever wherever whenever however whether
    be am is are was were been being have has had having do does did doing
    will would shall should can could may might must ought
    about above across after against along alongside amid amidst among amongst around as at atop before behind below
    beneath beside besides between beyond by despite down during except for from in inside into of off on onto out
    outside over per since through throughout till to toward towards under underneath unlike until unto up upon via
    with within without
    and or but nor so yet if because although though while whilst whereas unless lest than then once
    not there here thus hence therefore moreover furthermore nevertheless nonetheless meanwhile otherwise also too
    very quite rather else
    character characters s
""".split())
#: Code points a tokenizer drops without a trace (BERT's WordPiece cleans control and format
#: characters away, so MiniLM reads "Swe\u00adden" as "sweden"): Unicode's default-ignorable code
#: points (soft hyphen, zero-width space and joiners, word joiner, bidi controls, variation
#: selectors, BOM, ...), every other format character and the control characters that are no
#: whitespace.
_INVISIBLE = regex.compile(r"[\p{Default_Ignorable_Code_Point}\p{Cf}\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f]")
#: Apostrophes written otherwise (right single quotation mark, modifier letter apostrophe).
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u02bc": "'"})
#: A word: letters, marks and digits of any script, with its apostrophe parts (``yuki's``, ``isn't``).
_WORD = regex.compile(r"[\p{L}\p{M}\p{N}]+(?:'[\p{L}\p{M}\p{N}]+)*")
#: What follows the apostrophe of a contraction or a possessive: the word before it is kept, the
#: ending is dropped (a possessive ``'s`` is no word; ``'ve``, ``'re``, ``'ll``, ``'d``, ``'m``,
#: ``n't`` are function words).
_CONTRACTION_ENDINGS = frozenset({"s", "ve", "re", "ll", "d", "m"})
#: Negations whose first word is not what is left before ``n't``.
_NEGATED = {"ca": "can", "wo": "will", "sha": "shall", "ai": "is"}
#: Parts of speech tried for a word lemminflect's dictionary does not know (its rules need one).
_OOV_POS: tuple[str, ...] = ("NOUN", "VERB")


def normalise(text: str) -> str:
    """``text`` as every check compares it: NFKC (ligatures, full-width and compatibility forms
    folded), invisible characters removed (:data:`_INVISIBLE`: what a tokenizer drops),
    casefolded (``Straße`` -> ``strasse``), accents stripped (combining marks removed after NFD, as
    BERT's uncased tokenizers do: ``café`` -> ``cafe``, ``Zürich`` -> ``zurich``), NFKC again, and
    apostrophes written as ``'``."""
    text = _INVISIBLE.sub("", unicodedata.normalize("NFKC", text)).casefold()
    text = "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")
    return unicodedata.normalize("NFKC", text).translate(_APOSTROPHES)


def invisible_characters(text: str) -> list[str]:
    """The invisible characters of ``text`` (those :func:`normalise` removes), in order."""
    return _INVISIBLE.findall(text)


def describe_invisible(text: str, what: str) -> str | None:
    """One line saying that ``what`` (``"the question"``) holds an invisible character, naming the
    first one by code point and name; None when it holds none."""
    found = invisible_characters(text)
    if not found:
        return None
    first = found[0]
    name = unicodedata.name(first, "") or ("a control character" if unicodedata.category(first) == "Cc" else "unassigned")
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return f"{what} holds an invisible character U+{ord(first):04X} ({name}){more}, which a tokenizer drops: write the text without it"


def words(text: str) -> list[str]:
    """The words of ``text`` as the checks compare them, in order (repeats kept): :func:`normalise`,
    then runs of letters, marks and digits of any script (``москва``, ``zurich`` whole: no word is
    cut where an accent or another script was); a hyphen or any other punctuation ends a word.
    A possessive is its word (``yuki's`` -> ``yuki``, never a word ``s``) and a contraction its
    first word (``isn't`` -> ``is``, ``won't`` -> ``will``, ``she'd`` -> ``she``); any other
    apostrophe splits (``o'brien`` -> ``o``, ``brien``)."""
    found = []
    for word in _WORD.findall(normalise(text)):
        base, *rest = word.split("'")
        if not rest:
            found.append(base)
        elif len(rest) == 1 and rest[0] in _CONTRACTION_ENDINGS:
            found.append(base)
        elif rest == ["t"] and base.endswith("n") and len(base) > 1:
            found.append(_NEGATED.get(base[:-1], base[:-1]))
        else:
            found += [base, *rest]
    return found


def content_words(text: str) -> list[str]:
    """The :func:`words` of ``text`` that are not :data:`FUNCTION_WORDS`, in order of first
    appearance, each once."""
    return list(dict.fromkeys(w for w in words(text) if w not in FUNCTION_WORDS))


def holds_words(text_words: Sequence[str], phrase_words: Sequence[str]) -> bool:
    """Whether ``phrase_words`` occur in ``text_words`` one after the other (both :func:`words`):
    a name or keyword found as whole words, never inside another word."""
    n = len(phrase_words)
    if not n:
        return False
    first = phrase_words[0]
    return any(text_words[i: i + n] == list(phrase_words) for i, w in enumerate(text_words) if w == first)


def contains_words(text: str, phrase: str) -> bool:
    """Whether ``phrase`` occurs in ``text`` as whole words after normalisation (:func:`words`):
    ``café`` is in "a cafe", ``rich`` is not in "Zürich", ``Yuki`` is in "Yuki's"."""
    return holds_words(words(text), words(phrase))


class WordIndex:
    """Where each word (:func:`words`) occurs among many texts (a corpus's chunks): the texts
    holding a phrase as whole words are found without reading every text again."""

    def __init__(self, texts: Iterable[str]):
        self._texts = list(texts)
        self._postings: dict[str, list[int]] = {}
        for i, text in enumerate(self._texts):
            for word in set(words(text)):
                self._postings.setdefault(word, []).append(i)

    def __len__(self) -> int:
        return len(self._texts)

    def holding(self, phrase: str) -> list[int]:
        """The indexes (in order) of the texts that hold ``phrase`` as whole words."""
        wanted = words(phrase)
        if not wanted:
            return []
        candidates = set(self._postings.get(wanted[0], ()))
        for word in wanted[1:]:
            candidates &= set(self._postings.get(word, ()))
        if len(wanted) == 1:
            return sorted(candidates)
        return [i for i in sorted(candidates) if holds_words(words(self._texts[i]), wanted)]


#: UTS #39's augmented script sets: Han goes with Japanese, Korean and Bopomofo writing; kana
#: with Japanese, Hangul with Korean (so 東京の is one script, a Cyrillic е in Swеden is not), and
#: Latin with each of the three, as UTS #39's highly restrictive level allows (Tシャツ).
_AUGMENTED = {"Hani": {"Hani", "Jpan", "Kore", "Hanb"}, "Hira": {"Hira", "Jpan"}, "Kana": {"Kana", "Jpan"},
              "Hang": {"Hang", "Kore"}, "Bopo": {"Bopo", "Hanb"}, "Latn": {"Latn", "Jpan", "Kore", "Hanb"}}
#: Scripts of characters used with any script (digits, punctuation, combining marks).
_ANY_SCRIPT = frozenset({"Zyyy", "Zinh", "Zzzz"})


@lru_cache(maxsize=4096)
def _scripts(char: str) -> frozenset[str]:
    found: set[str] = set()
    for script in unicode_scripts.script_extension(char):
        found |= _AUGMENTED.get(script, {script})
    return frozenset(found)


def mixed_script_words(text: str) -> list[tuple[str, list[str]]]:
    """The words of ``text`` (as written, invisible characters removed) whose letters belong to no
    one script (UTS #39's resolved script set is empty), each with its scripts' names: a
    look-alike letter of another script (``Swеden`` with a Cyrillic ``е``) hides the word it
    imitates from every word comparison, while a tokenizer may still read it close to the word.
    Script data: :mod:`fontTools.unicodedata` (Unicode's ``ScriptExtensions.txt``). Read before
    NFKC: compatibility characters (the micro sign of ``5µm``, mathematical letters) belong to no
    script, and :func:`normalise` folds them for every comparison."""
    text = _INVISIBLE.sub("", text).translate(_APOSTROPHES)
    mixed = []
    for word in _WORD.findall(text):
        resolved: frozenset[str] | None = None
        for char in word:
            scripts = _scripts(char)
            if scripts & _ANY_SCRIPT:
                continue
            resolved = scripts if resolved is None else resolved & scripts
        if resolved is not None and not resolved:
            names = {unicode_scripts.script_name(unicode_scripts.script(c)) for c in word} - {"Common", "Inherited", "Unknown"}
            mixed.append((word, sorted(names)))
    return mixed


def same_words(a: str, b: str) -> bool:
    """Whether two texts are the same words in the same order (:func:`words`): case, accents,
    punctuation and spacing aside."""
    return words(a) == words(b)


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
    """scikit-learn's English stop words (imported when first needed: scikit-learn takes a while):
    what theme terms (:func:`topic_terms`) leave out. A topic's name can do without fire or back;
    the overlap check cannot (:data:`FUNCTION_WORDS`)."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    return frozenset(ENGLISH_STOP_WORDS)


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
