"""Views, column comments and SQL functions for BI tools (filled by the SQL-surface work).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from alembic import op  # noqa: F401

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade(schema: str = "ragpg") -> None:
    pass


def downgrade(schema: str = "ragpg") -> None:
    pass
