"""Settings of the docsearch example: one PostgreSQL database (psycopg 3), shared with ragpg.

The database comes from ``DATABASE_URL`` (any libpq URL or DSN); ragpg's settings from
``RAGPG`` below, itself fed by the ``RAGPG_*`` variables the ``ragpg`` CLI also reads.
"""

from __future__ import annotations

import os
from typing import Any

from psycopg.conninfo import conninfo_to_dict


def database_from_url(url: str) -> dict[str, Any]:
    """Django's DATABASES entry for a libpq URL, on the psycopg 3 backend."""
    params = conninfo_to_dict(url)
    options = {k: v for k, v in params.items() if k not in {"dbname", "user", "password", "host", "port"}}
    return {
        "ENGINE": "django.db.backends.postgresql",  # psycopg 3 when it is installed
        "NAME": params.get("dbname", ""),
        "USER": params.get("user", ""),
        "PASSWORD": params.get("password", ""),
        "HOST": params.get("host", ""),
        "PORT": params.get("port", ""),
        "OPTIONS": options,
        "CONN_MAX_AGE": 0,
    }


SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "insecure-example-key-change-me")
DEBUG = os.environ.get("DJANGO_DEBUG") == "1"
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]

# Django's users and groups: a user reads the documents of its groups (docsearch.engine).
INSTALLED_APPS = ["django.contrib.auth", "django.contrib.contenttypes", "django.contrib.sessions",
                  "docsearch"]
MIDDLEWARE = ["django.middleware.common.CommonMiddleware",
              "django.contrib.sessions.middleware.SessionMiddleware",
              "django.contrib.auth.middleware.AuthenticationMiddleware"]
ROOT_URLCONF = "django_site.urls"
WSGI_APPLICATION = "django_site.wsgi.application"

DATABASES = {"default": database_from_url(os.environ.get("DATABASE_URL", "postgresql:///docsearch"))}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "UTC"

# ragpg inside this project: its own schema in the same database, on Django's connection.
RAGPG = {
    "SCHEMA": os.environ.get("RAGPG_DATABASE_SCHEMA", "ragpg"),
    "COLLECTION": os.environ.get("RAGPG_COLLECTION", "default"),
    "EMBEDDING_PROVIDER": os.environ.get("RAGPG_EMBEDDING_PROVIDER"),  # http | local | none
    "EMBEDDING_URL": os.environ.get("RAGPG_EMBEDDING_URL"),
    # Users read what their groups may (`ragpg permissions enable` first; docs/permissions.md).
    "PERMISSIONS": os.environ.get("RAGPG_PERMISSIONS_ENABLED", "").lower() in ("1", "true"),
}
