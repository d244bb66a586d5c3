"""The `essaflow` command line (typer): the app is :data:`cli.main.app`; run it as `essaflow` or `python -m cli.main`.

It sits on top of the library beside flows/: it may import essaflow, tasks, flows and devstack; nothing imports it.
"""
