"""Placeholder: the pinned pool (being written)."""


class PinnedPool:
    reconnects = 0

    def __init__(self, connect, shapes, **options):
        self.size = options.get("size", 0)

    def close(self):
        pass

    def abandon_after_fork(self):
        pass

    def stats(self):
        return {"size": self.size, "active": 0, "free": 0, "waiting": 0}
