"""Load-test the example app (examples/wsgi_app.py) over HTTP with Locust.

    python examples/wsgi_app.py 8000 &           # or: gunicorn -c examples/gunicorn.conf.py
    locust -f loadtest/locustfile_http.py --host http://127.0.0.1:8000
"""

import os

from locust import FastHttpUser, constant, task

QUERIES = 20
UPDATES = 5


class AppUser(FastHttpUser):
    host = os.environ.get("APP_URL", "http://127.0.0.1:8000")
    wait_time = constant(0)

    @task(5)
    def single_query(self):
        self.client.get("/db")

    @task(3)
    def multiple_queries(self):
        self._expect_rows(f"/queries?n={QUERIES}", QUERIES)

    @task(1)
    def updates(self):
        self._expect_rows(f"/updates?n={UPDATES}", UPDATES)

    def _expect_rows(self, path: str, count: int) -> None:
        with self.client.get(path, catch_response=True) as response:
            if response.status_code == 200 and len(response.json()) != count:
                response.failure(f"expected {count} rows")
