"""Placeholder: sessions and transactions (being written)."""


class Session:
    def __init__(self, pool, acquire_timeout=None):
        raise NotImplementedError


class Transaction:
    @classmethod
    def on_new_session(cls, session, **options):
        raise NotImplementedError
