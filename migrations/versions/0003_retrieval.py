"""BM25 statistics and evaluation history (filled by the retrieval work).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from alembic import op  # noqa: F401

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade(schema: str = "ragpg") -> None:
    pass


def downgrade(schema: str = "ragpg") -> None:
    pass
