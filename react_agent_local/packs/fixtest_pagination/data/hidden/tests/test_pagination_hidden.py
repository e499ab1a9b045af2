from webapp.pagination import page_items


def test_middle_page():
    assert page_items(list("abcdefghij"), 2, per_page=3) == ["d", "e", "f"]


def test_past_the_last_page():
    assert page_items(list(range(7)), 3, per_page=5) == []


def test_default_page_size():
    assert page_items(list(range(30)), 1) == list(range(10))
