"""The command line's run commands, after the gate admitted a run: `finish` (its actuals and how it
stopped), `checkpoint` (a valid checkpoint it saved) and `recover` (an interruption and the
recovery decision: resume, restart or end). Each writes through lib.ledger and prints JSON."""
from __future__ import annotations

import argparse

from lib.cli.args import TIME_RANGE, nonneg_float, nonneg_int, timestamp
from lib.authority.settings import configured_authority
from lib.cli.output import EXIT_OK, dump_json, say
from lib.gate.terms import ARTIFACT_STATUSES, STOP_REASONS
from lib.ledger.finishing import finish_run
from lib.ledger.recovering import EVENTS, checkpoint_run, recover_run


def cmd_finish(args) -> int:
    row = finish_run(
        args.run_id, actual_gpu_hours=args.actual_gpu_hours, stop_reason=args.stop_reason,
        ended_at=args.ended_at, started_at=args.started_at,
        last_valid_checkpoint=args.last_valid_checkpoint, interruptions=args.interruptions,
        restarts=args.restarts, artifact_status=args.artifact_status,
        full_evaluation=args.full_evaluation, holdout_reads=args.holdout_reads,
        act_checkpoint_gpu_hours=args.checkpoint_gpu_hours, act_retry_gpu_hours=args.retry_gpu_hours,
        act_eval_gpu_hours=args.eval_gpu_hours, act_lost_work_gpu_hours=args.lost_work_gpu_hours,
        db=args.db, timeout_s=args.timeout, authority=configured_authority())
    print(dump_json(row))
    say(f"finish: updated run {row['run_id']}: {row['actual_gpu_hours']:g} GPU-h, stopped "
        f"{row['stop_reason']}, artifact {row['artifact_status']}")
    return EXIT_OK


def cmd_checkpoint(args) -> int:
    out = checkpoint_run(args.run_id, args.name, at=args.at, db=args.db, timeout_s=args.timeout)
    print(dump_json(out))
    say(f"checkpoint: run {out['run_id']}: " + ("recorded" if out["recorded"] else "already recorded, nothing written"))
    return EXIT_OK


def cmd_recover(args) -> int:
    out = recover_run(args.run_id, event=args.event, at=args.at, lost_gpu_hours=args.lost_gpu_hours,
                      db=args.db, timeout_s=args.timeout, authority=configured_authority())
    print(dump_json(out))
    say(f"recover: run {out['run_id']}: {out['event']} (attempt {out['attempt']}, "
        f"{out['lost_gpu_hours']:.2f} GPU-h lost) -> {out['action']}")
    return EXIT_OK


def add_run_parsers(sub, common) -> None:
    s = sub.add_parser("finish", parents=[common], help="record a run's actuals and how it stopped")
    s.add_argument("run_id")
    s.add_argument("--actual-gpu-hours", type=nonneg_float, required=True)
    s.add_argument("--stop-reason", required=True, choices=STOP_REASONS)
    s.add_argument("--ended-at", type=timestamp, help=f"ISO-8601 time ({TIME_RANGE}; default: now)")
    s.add_argument("--started-at", type=timestamp, help=f"ISO-8601 time ({TIME_RANGE})")
    s.add_argument("--last-valid-checkpoint")
    s.add_argument("--interruptions", type=nonneg_int)
    s.add_argument("--restarts", type=nonneg_int)
    s.add_argument("--artifact-status", choices=ARTIFACT_STATUSES)
    s.add_argument("--full-evaluation", action=argparse.BooleanOptionalAction, default=None)
    s.add_argument("--holdout-reads", type=nonneg_int)
    s.add_argument("--checkpoint-gpu-hours", type=nonneg_float)
    s.add_argument("--retry-gpu-hours", type=nonneg_float)
    s.add_argument("--eval-gpu-hours", type=nonneg_float)
    s.add_argument("--lost-work-gpu-hours", type=nonneg_float)

    s = sub.add_parser("checkpoint", parents=[common],
                       help="record a valid checkpoint a started run saved (work before it is kept)")
    s.add_argument("run_id")
    s.add_argument("name", help="the checkpoint's name or path")
    s.add_argument("--at", type=timestamp, default=None, help=f"when it was saved ({TIME_RANGE}; default: now)")

    s = sub.add_parser("recover", parents=[common],
                       help="record an interruption of a started run and decide: resume, restart or end")
    s.add_argument("run_id")
    s.add_argument("--event", required=True, choices=tuple(EVENTS))
    s.add_argument("--at", type=timestamp, default=None, help=f"when it happened ({TIME_RANGE}; default: now)")
    s.add_argument("--lost-gpu-hours", type=nonneg_float, default=None,
                   help="GPU-hours of work lost since the last checkpoint (default: from the run's "
                        "checkpoint record, else the whole attempt)")


RUN_COMMANDS = {"finish": cmd_finish, "checkpoint": cmd_checkpoint, "recover": cmd_recover}
