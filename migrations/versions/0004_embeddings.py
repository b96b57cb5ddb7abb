"""Model lifecycle: re-embedding state (filled by the embeddings work).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from alembic import op  # noqa: F401

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade(schema: str = "ragpg") -> None:
    pass


def downgrade(schema: str = "ragpg") -> None:
    pass
