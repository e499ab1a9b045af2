"""Word statistics of a text: its words, how often each occurs, the most common ones."""

import re
from collections import Counter

WORD = re.compile(r"[A-Za-z']+")


def words(text):
    """The words of ``text`` in lower case, so "The" and "the" are one word."""
    return [word for word in WORD.findall(text)]


def word_frequencies(text):
    """How often each word occurs."""
    return Counter(words(text))


def most_common(text, n=3):
    """The ``n`` most frequent words, most frequent first."""
    return [word for word, _ in word_frequencies(text).most_common(n)]
