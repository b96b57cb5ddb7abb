"""URL routes of the docsearch example."""

from django.urls import path
from docsearch import views

urlpatterns = [path("search", views.search, name="search")]
