"""The ``edgeopt`` command: the typer app (app.py), its shared options, tables and help layout, one module per command."""
