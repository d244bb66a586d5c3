"""`essaflow` command line. Every job prints one JSON line last, so scripts can parse the outcome."""

from __future__ import annotations

import typer

from cli import check, compare, deploy, gc, jobs, pipeline, projection, stack
from cli.quiet import quiet_libraries
from essaflow.secrets import mask_std_streams

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)


# Before any command: every line it prints, whoever prints it (MLflow's "View run" link with the tracking URI,
# Prefect's console, lines Ray forwards from its workers), leaves with URI passwords and secret values masked, and
# libraries' own bookkeeping lines stay off the terminal (cli/quiet.py). No docstring: it would become --help's text.
@app.callback()
def before_any_command() -> None:
    mask_std_streams()
    quiet_libraries()


# Registered here, in the order `essaflow --help` lists them; each command lives in the module of its concern.
app.command()(pipeline.demo)
app.command()(pipeline.run)
app.command("eval")(pipeline.eval_)
app.command("compare")(compare.compare_methods)
app.command("compare-table")(compare.compare_table)
app.command()(jobs.essa)
app.command()(jobs.grpo)
app.command("check-config")(check.check_config)
app.command("build-tiny")(jobs.build_tiny)
app.command("project-scaling")(projection.project_scaling)
app.command("gc")(gc.collect_garbage)
app.add_typer(stack.stack_app, name="stack")
app.command()(deploy.deploy)


if __name__ == "__main__":
    app()
