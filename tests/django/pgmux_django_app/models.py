"""Small models covering the types Django's PostgreSQL code handles specially."""

from django.db import models


class Item(models.Model):
    name = models.CharField(max_length=30)
    data = models.JSONField(null=True)
    address = models.GenericIPAddressField(null=True)
    amount = models.DecimalField(max_digits=8, decimal_places=2, null=True)
    at = models.DateTimeField(null=True)
    count = models.IntegerField(default=0)

    class Meta:
        app_label = "pgmux_django_app"


class Tagged(models.Model):
    """contrib.postgres's fields: hstore, a range, an array."""

    from django.contrib.postgres.fields import ArrayField, HStoreField, IntegerRangeField

    tags = HStoreField(default=dict)
    span = IntegerRangeField(null=True)
    words = ArrayField(models.CharField(max_length=10), default=list)

    class Meta:
        app_label = "pgmux_django_app"
