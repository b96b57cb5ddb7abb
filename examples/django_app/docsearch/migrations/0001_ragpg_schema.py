"""ragpg's schema, created by ragpg's own Alembic revisions (see docsearch/schema.py)."""

from django.db import migrations

from docsearch.schema import upgrade_ragpg


class Migration(migrations.Migration):
    initial = True
    dependencies: list[tuple[str, str]] = []
    operations = [
        # Reversing is a no-op on purpose: dropping the index is `ragpg`'s business, not
        # something `migrate docsearch zero` should do to a production corpus.
        migrations.RunPython(upgrade_ragpg, migrations.RunPython.noop, elidable=False),
    ]
