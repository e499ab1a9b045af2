from textkit.counting import most_common, word_frequencies, words


def test_words_are_split_on_punctuation():
    assert words("one, two; three") == ["one", "two", "three"]


def test_frequencies_ignore_case():
    counts = word_frequencies("The cat saw the dog")
    assert counts["the"] == 2
    assert counts["cat"] == 1


def test_most_common():
    assert most_common("b a b c b a", n=2) == ["b", "a"]
