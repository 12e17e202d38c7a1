"""Django database backend on pgmux: ``DATABASES[...]["ENGINE"] = "pgmux.contrib.django"``.

Django's per-greenlet (per-thread) connection is a cheap ``pgmux.dbapi`` handle on the
process's shared ``pgmux.Client``: autocommit ORM statements are multiplexed on the
client's pipelined connections, an ``atomic()`` block (``ATOMIC_REQUESTS`` too) takes a
pinned connection at its first statement and gives it back at COMMIT or ROLLBACK. The
SQL is Django's own PostgreSQL backend's (operations, introspection, schema editor,
compiler, features): ``vendor`` is "postgresql". See ``base`` for the settings.
"""
