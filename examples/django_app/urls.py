from django.urls import path

from django_app import views

urlpatterns = [
    path("db", views.db),
    path("queries", views.queries),
    path("updates", views.updates),
    path("fortunes", views.fortunes),
    path("stats", views.stats),
    path("health", views.health),
]
