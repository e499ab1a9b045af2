"""Pagination of list views: which items a page shows and how many pages there are."""

import math

DEFAULT_PER_PAGE = 10


def page_count(total, per_page=DEFAULT_PER_PAGE):
    """How many pages ``total`` items need (one, for no items)."""
    return max(1, math.ceil(total / per_page))


def page_items(items, page, per_page=DEFAULT_PER_PAGE):
    """The items on page ``page`` (1 is the first page); an empty list past the last page."""
    if page < 1:
        raise ValueError("page numbers start at 1")
    start = page * per_page
    return items[start:start + per_page]
