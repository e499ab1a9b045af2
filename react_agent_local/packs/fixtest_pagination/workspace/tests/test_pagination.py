from webapp.pagination import page_count, page_items


def test_page_count():
    assert page_count(0) == 1
    assert page_count(25, per_page=10) == 3


def test_first_page():
    items = list(range(1, 26))
    assert page_items(items, 1, per_page=10) == list(range(1, 11))


def test_last_page():
    items = list(range(1, 26))
    assert page_items(items, 3, per_page=10) == [21, 22, 23, 24, 25]
