"""The run tables' schema: each table's checks name only columns the table has, and the keys that
name a series, a cell and a condition are columns of the tables grouped by them."""

from __future__ import annotations

import pytest

from embedeval import schema
from embedeval.labels import RETRIEVAL_MEASURES
from embedeval.run import BREAKS, DECISION, HAYSTACKS, LATER_DEFAULTS, METRICS, RETRIEVAL, SIMILARITIES, TABLE_SCHEMAS, TIMINGS

COLUMNS = {HAYSTACKS: schema.HAYSTACK_COLUMNS, SIMILARITIES: schema.SIMILARITY_COLUMNS,
           RETRIEVAL: [*schema.RETRIEVAL_COLUMNS, *RETRIEVAL_MEASURES], METRICS: schema.METRIC_COLUMNS,
           BREAKS: schema.BREAK_COLUMNS, TIMINGS: schema.TIMING_COLUMNS, DECISION: schema.DECISION_COLUMNS}


@pytest.mark.parametrize("table", sorted(TABLE_SCHEMAS))
def test_a_table_schema_names_only_the_tables_columns(table):
    declared = TABLE_SCHEMAS[table]
    named = {*declared.numbers, *declared.integers, *declared.flags, *declared.texts, *declared.required, *declared.ranges,
             *declared.values, *declared.unique, *(c for rule in declared.rules for c in (rule.column, *rule.needs))}
    assert named - set(COLUMNS[table]) == set()
    assert len(set(COLUMNS[table])) == len(COLUMNS[table])  # a column once


def test_the_keys_are_columns_of_the_tables_they_group():
    assert schema.CELL == [*schema.SERIES_KEYS[:4], "length", *schema.SERIES_KEYS[4:]]
    assert schema.BREAK_COLUMNS[:len(schema.SERIES_KEYS)] == schema.SERIES_KEYS
    assert schema.METRIC_COLUMNS[:len(schema.CELL)] == schema.CELL
    for columns in (schema.SIMILARITY_COLUMNS, schema.RETRIEVAL_COLUMNS):
        assert set(schema.CELL) | set(schema.CONDITION) <= set(columns)
    assert set(LATER_DEFAULTS) <= set(schema.SIMILARITY_COLUMNS) | set(schema.HAYSTACK_COLUMNS)
    assert set(schema.LATER_HAYSTACK_COLUMNS) <= set(schema.HAYSTACK_COLUMNS)
    assert set(schema.ADDED_BREAK_COLUMNS) <= set(schema.BREAK_COLUMNS)
    assert set(schema.ADDED_DECISION_COLUMNS) <= set(schema.DECISION_COLUMNS)
