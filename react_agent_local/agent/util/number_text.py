"""Numbers as text: the three ways the package writes a number, each once.

``number_text``     as a record and a right answer write it: every digit, a whole number without
                    ``.0`` (``79``, ``78.5``, ``79`` for ``79.0``). The generators write records and
                    expected answers with it; the claim gate and the prompts state a check with it.
``exact_text``      as the value is held: an int's digits, a float's ``repr`` (``78.0`` stays
                    ``78.0``, ``1e+20`` stays ``1e+20``), so a model copies a table cell or a
                    record's number exactly as the evidence gives it.
``short_text``      six significant digits (``%g``: ``78.5``, ``1.23457e+06``): the release-rule
                    record's rendered line, and the forced calculator expression over its values,
                    which must write each value exactly as that line shows it.

They agree on every int, and on every float with at most six significant digits that is not whole;
they part on a whole float (``exact_text`` keeps its ``.0``) and on a long one (``short_text``
rounds it).
"""

from __future__ import annotations


def number_text(value: int | float) -> str:
    """A number as a record (and a right answer) writes it: ``79``, ``78.5``, ``-3``; ``79.0`` -> ``79``."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value) if isinstance(value, int) else repr(value)


def exact_text(value: int | float) -> str:
    """A number as it is held, every digit: ``1234567.5`` (not ``1.23457e+06``), ``78.0`` as ``78.0``."""
    return str(value) if isinstance(value, int) else repr(value)


def short_text(value: int | float) -> str:
    """A number in six significant digits, an int whole: ``78.5``, ``79`` for ``79.0``, ``1.23457e+06``."""
    return str(value) if isinstance(value, int) else f"{value:g}"
