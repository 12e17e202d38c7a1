"""SQLAlchemy: the postgresql+pgmux dialect, its compliance suite, Flask-SQLAlchemy under gunicorn."""
