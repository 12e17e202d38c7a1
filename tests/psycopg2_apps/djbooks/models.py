"""The books as Django models (tables accounts, notes, transfers)."""

from django.db import models


class Account(models.Model):
    id = models.IntegerField(primary_key=True)
    owner = models.TextField()
    balance = models.BigIntegerField()

    class Meta:
        app_label = "djbooks"
        db_table = "accounts"


class Note(models.Model):
    key = models.IntegerField(primary_key=True)
    note = models.TextField()

    class Meta:
        app_label = "djbooks"
        db_table = "notes"


class Transfer(models.Model):
    source = models.ForeignKey(Account, models.PROTECT, related_name="+")
    target = models.ForeignKey(Account, models.PROTECT, related_name="+")
    amount = models.BigIntegerField()

    class Meta:
        app_label = "djbooks"
        db_table = "transfers"
