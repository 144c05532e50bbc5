"""The command line, `python -m lib COMMAND ...` (what a scheduler's submit hook and cron call).

- `main`: the parser, the global options and the gate's own commands (check, submit, import, demo, export, teams, forecast).
- `args`: argument types (times within TIME_RANGE, counts, weeks).
- `output`: exit codes, JSON on stdout, the closing line on stderr, the progress bar.
- `runs`: finish, checkpoint, recover.
- `plan`: the forward plan.
- `queue`: the line of waiting requests: queue, queue admit, cancel.
- `replay`: policy replay.
- `alerts`: budget alerts and their webhook.
- `slurm`: the Slurm integration's commands.
- `authority`: the shared authority several clusters decide against.
"""
