"""The Django app of django_books.py: accounts, notes and transfers (psycopg2_apps.books)."""
