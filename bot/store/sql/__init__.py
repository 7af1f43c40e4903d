"""The store written once: each part's SQL against one small connection interface.

``conn.py`` is that interface and the ``Dialect`` (what really differs between SQLite and
PostgreSQL: row locks, booleans, lists as parameters); ``core.py`` the helpers every part
uses; the parts (sessions, messages, queue, retention, people, agenda, console) implement
the contracts. A backend (``bot/store/sqlite``, ``bot/store/postgres``) adds its connection
and transactions, and the few statements it writes its own way.

What each method does is written once, in the contracts (bot/store/contracts.py,
bot/store/console.py); a method here has a docstring only when it has something to say about
its own statements (their locks, snapshots, indexes).
"""
