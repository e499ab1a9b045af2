from textkit.counting import most_common, words


def test_words_are_lower_case():
    assert words("Hello WORLD") == ["hello", "world"]


def test_most_common_counts_capitalised_words_together():
    assert most_common("Go go GO stop", n=1) == ["go"]
