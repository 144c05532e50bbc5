"""`python -m lib alerts`: evaluate each team's budget thresholds (data/teams.toml [alerts]) and send
every crossing not yet delivered to the webhook ($GATE_ALERT_WEBHOOK, else [alerts] webhook), once."""
from __future__ import annotations

from lib.cli.args import TIME_RANGE, timestamp
from lib.cli.output import EXIT_FAILURE, EXIT_OK, dump_json, say
from lib.dashboard.alerts import run_alerts
from lib.ledger.alert_settings import shown_webhook, webhook_url
from lib.ledger.audit import command_line
from lib.ledger.teams_file import load_teams_file


def cmd_alerts(args) -> int:
    settings = load_teams_file(args.teams_file)["alerts"]
    url = webhook_url(settings)
    out = run_alerts(settings, url, db=args.db, now=args.now, who=command_line(), timeout_s=args.timeout,
                     dry_run=args.dry_run)
    print(dump_json({k: out[k] for k in ("raised", "sent", "failed", "unsent", "errors", "alerts")}))
    if args.dry_run:
        say(f"alerts: {len(out['crossed'])} threshold(s) crossed this month; dry run, nothing written or sent")
        return EXIT_OK
    where = shown_webhook(url) if url else "no webhook configured ($GATE_ALERT_WEBHOOK or [alerts] webhook)"
    say(f"alerts: {out['raised']} new, {out['sent']} sent to {where}, {out['unsent']} kept for the next run"
        + (f"; {out['failed']} delivery attempt(s) failed" if out["failed"] else ""))
    return EXIT_FAILURE if out["failed"] else EXIT_OK


def add_alert_parser(sub, common) -> None:
    s = sub.add_parser("alerts", parents=[common],
                       help="send each team's budget alerts (crossed thresholds) to the webhook, once")
    s.add_argument("--teams-file", default=None, help="teams file with [alerts] (default data/teams.toml)")
    s.add_argument("--now", type=timestamp, default=None, help=f"evaluate as of this time ({TIME_RANGE}; default now)")
    s.add_argument("--dry-run", action="store_true", help="evaluate only: write and send nothing")


ALERT_COMMANDS = {"alerts": cmd_alerts}
