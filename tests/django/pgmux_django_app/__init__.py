"""The models tests/django's tests use (an app of their own, installed by conftest)."""
