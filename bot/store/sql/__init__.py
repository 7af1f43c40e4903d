"""The store written once: each part's SQL against one small connection interface.

``conn.py`` is that interface and the ``Dialect`` (what really differs between SQLite and
PostgreSQL: row locks, booleans, lists as parameters); ``core.py`` the helpers every part
uses; the parts (sessions, messages, queue, retention, people) implement the contracts of
``bot/store/contracts.py``. A backend (``bot/store/sqlite``, ``bot/store/postgres``) adds its
connection and transactions, and the few statements it writes its own way.
"""
