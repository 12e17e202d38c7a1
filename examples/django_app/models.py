"""The TechEmpower tables: world (10,000 rows) and fortune (12 rows)."""

from django.db import models


class World(models.Model):
    randomnumber = models.IntegerField()

    class Meta:
        db_table = "world"


class Fortune(models.Model):
    message = models.CharField(max_length=2048)

    class Meta:
        db_table = "fortune"
