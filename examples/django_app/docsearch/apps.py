"""App configuration of docsearch."""

from django.apps import AppConfig


class DocsearchConfig(AppConfig):
    name = "docsearch"
    default_auto_field = "django.db.models.BigAutoField"
