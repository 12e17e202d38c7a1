"""Applications around psycopg2 (Celery, SQLAlchemy, Django, WSGI) on both implementations."""
