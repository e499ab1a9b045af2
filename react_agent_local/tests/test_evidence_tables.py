"""The evidence read as tables, computations and thresholds (``agent/gate/evidence_tables.py``), from results
shaped as the tools return them."""

from __future__ import annotations

import pytest

from agent.contracts.decision import Observation
from agent.gate.evidence_tables import expression_kind, read_evidence, sql_kinds


@pytest.mark.parametrize("expression,kind", [
    ("(72 + 78 + 81) / 3", "mean"), ("72 + 78", "sum"), ("84 - 72", "difference"),
    ("(80 + 79.5) / 2 - (78 + 83.5) / 2", "difference"), ("11069 / 428960 * 1000", "product"),
    ("749 / 12480 * 100", "ratio"), ("27360935000000 / 334914895", "ratio"), ("10000 * (1 + 0.035) ** 7", "product"),
    ("5200 * 7 / 100 * 2", "product"), ("(95 - 100) / 100 * 100", "ratio"), ("round((1 + 2) / 2, 2)", "mean"),
    ("not an expression (", "value"),
])
def test_a_calculator_expression_is_read_by_its_outermost_operation(expression, kind):
    assert expression_kind(expression) == kind


def test_a_querys_projections_are_read_by_their_aggregates():
    sql = ('SELECT AVG(rate) AS a, MEDIAN(rate) AS m, SUM(n), MAX(rate) - MIN(rate) AS spread, ROUND(AVG(rate), 2), '
           'quantile_cont(rate, 0.5), SUM(n) / COUNT(*), office FROM t')
    assert sql_kinds(sql, list("abcdefgh")) == ["mean", "median", "sum", "difference", "mean", "median", "ratio", "value"]
    assert sql_kinds("this is (not sql", ["x"]) == ["value"]


def test_tables_records_queries_and_rules_are_read_from_the_results():
    tables = {"tables": [{"id": "t#t1", "source": "t.md", "title": "T", "sql_name": "t", "rows_total": 40,
                          "columns": [{"name": "Office", "unit": None, "kind": "text"},
                                      {"name": "Rate (%)", "unit": "%", "kind": "number"}],
                          "rows": [["Oslo", "82.5%"], ["Lima", 68]], "prose": "- office_floor_gte: 70"}],
              "records": {"R": {"title": "R", "columns": {"Score": {"North": 3, "South": 4}}, "rules": {"max_spread": 2}}},
              "citations": []}
    query = {"sql": "SELECT office, AVG(rate) AS avg_rate FROM t GROUP BY office", "columns": ["office", "avg_rate"],
             "rows": [["Lima", 68], ["Oslo", 82.5]]}
    evidence = read_evidence([Observation(id="obs-knowledge_search-1", tool="knowledge_search", ok=True, result=tables),
                              Observation(id="obs-table_query-2", tool="table_query", ok=True, result=query),
                              Observation(id="obs-calculator-3", tool="calculator", ok=False, result=None)])
    sample, record, picked = evidence.tables
    assert sample.rows == (("Oslo", {"Rate (%)": 82.5}), ("Lima", {"Rate (%)": 68.0})) and not sample.complete
    assert record.value("south", "Score") == 4 and record.complete
    assert picked.title == "query result" and not picked.complete  # a query's rows are its pick, never all of them
    assert picked.value("Oslo", "avg_rate") == 82.5
    assert [(c.kind, c.value) for c in evidence.computations] == [("mean", 68), ("mean", 82.5)]
    assert evidence.thresholds == {"max_spread": 2, "office_floor_gte": 70}
