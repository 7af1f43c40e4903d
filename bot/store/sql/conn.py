"""The connection interface the shared store parts are written against, and the dialect.

SQL is written once with PostgreSQL's numbered placeholders (``$1``, reusable in one
statement); the SQLite connection rewrites them to SQLite's ``?1``. Casts are standard
``CAST(x AS type)``. What the two databases spell differently comes from the ``Dialect``.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias


class Conn(abc.ABC):
    """One connection inside a transaction (or a plain read) of a store."""

    @abc.abstractmethod
    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        """Every row of a query."""

    @abc.abstractmethod
    async def fetchrow(self, sql: str, *args: Any) -> Any | None:
        """The first row of a query, or None."""

    @abc.abstractmethod
    async def fetchval(self, sql: str, *args: Any) -> Any:
        """The first column of the first row, or None."""

    @abc.abstractmethod
    async def execute(self, sql: str, *args: Any) -> int:
        """Run a statement; the rows it touched."""

    @abc.abstractmethod
    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run a statement once per row of arguments."""

    @abc.abstractmethod
    async def fetchmany(self, sql: str, rows: Iterable[Sequence[Any]]) -> list[Any]:
        """Run a statement once per row of arguments, in order; the rows they return."""


@dataclass(frozen=True, slots=True)
class Dialect:
    """The SQL that differs between the backends; everything else is written once."""

    name: str
    #: Boolean literals (SQLite stores 1/0; its partial index says ``pending = 1``).
    true: str
    false: str
    #: Row lock for the rest of the transaction: "" on SQLite, whose BEGIN IMMEDIATE already
    #: serializes every writer of the file.
    for_update: str
    #: The two-argument maximum (SQLite's scalar MAX, PostgreSQL's GREATEST).
    greatest: str
    #: LIMIT for "no limit" (SQLite: -1; PostgreSQL: NULL).
    no_limit: int | None
    #: ``x IN <list parameter>`` where the parameter is ``list_arg(...)``: "{p}" is the
    #: placeholder, "{t}" the element type (BIGINT or TEXT).
    in_list: str
    #: A list parameter as a table with one column named ``value``.
    list_table: str
    #: Encodes a list parameter for ``in_list``/``list_table``.
    json_lists: bool

    def any_of(self, placeholder: str, sql_type: str = "BIGINT") -> str:
        """`` IN (...)`` of a list parameter, e.g. ``"id" + d.any_of("$1")``."""
        return " " + self.in_list.format(p=placeholder, t=sql_type)

    def table_of(self, placeholder: str, sql_type: str = "TEXT") -> str:
        """A list parameter as a FROM item whose column is ``value``."""
        return self.list_table.format(p=placeholder, t=sql_type)

    def list_arg(self, values: Iterable[Any]) -> Any:
        """The argument for a list placeholder."""
        items = list(values)
        if not self.json_lists:
            return items
        return json.dumps(items)


SQLITE = Dialect(
    name="sqlite",
    true="1",
    false="0",
    for_update="",
    greatest="MAX",
    no_limit=-1,
    in_list="IN (SELECT value FROM json_each({p}))",
    list_table="json_each({p})",
    json_lists=True,
)
POSTGRES = Dialect(
    name="postgresql",
    true="TRUE",
    false="FALSE",
    for_update=" FOR UPDATE",
    greatest="GREATEST",
    no_limit=None,
    in_list="= ANY(CAST({p} AS {t}[]))",
    list_table="unnest(CAST({p} AS {t}[])) AS l(value)",
    json_lists=False,
)


#: Called with the text of every statement a store's connections run, transaction statements
#: included; it must be quick and must not touch the store. For counting statements
#: (bench/load.py, statement budgets); off by default. SQLite: its trace callback, with the
#: parameters filled in, in the connection's worker thread. PostgreSQL: asyncpg's query
#: logger, soon after the statement, in the event loop, with the placeholders as written.
StatementTrace: TypeAlias = Callable[[str], None]
