-- The ledger's schema, version 8 (lib/ledger/connection.py SCHEMA_VERSION). Units: GPU-hours
-- (_gpu_hours), hours (_hours), seconds (_s), gigabytes (_gb); money in `prices.currency`. Times are
-- UTC TIMESTAMPs. lib/ledger/connection.py applies this file to a new ledger and records
-- schema_version in meta. An older ledger gets this file too (every statement is IF NOT EXISTS, so
-- it only adds new tables), then connection._migrate adds the columns later versions gave to
-- existing tables: version 2 added teams.colour and the prices table; version 3 the audit table and
-- decisions.actor; version 4 the team_weeks table; version 5 teams.scaling_efficiency,
-- teams.enforce_spend_limit and teams.set_time_limit and the checkpoints, interruptions and alerts
-- tables; version 6 the cluster_windows table; version 7 teams.queue_max_age_days and the pools table;
-- version 8 alerts.claimed_by and alerts.claimed_until.

CREATE TABLE IF NOT EXISTS meta (
    key   VARCHAR PRIMARY KEY,
    value VARCHAR NOT NULL
);

-- One row per team: its policy as loaded from data/teams.toml (or created by an import).
CREATE TABLE IF NOT EXISTS teams (
    team                            VARCHAR PRIMARY KEY,
    reserved_gpus                   INTEGER NOT NULL CHECK (reserved_gpus >= 0),
    retraining_reserved_gpus        INTEGER NOT NULL DEFAULT 0 CHECK (retraining_reserved_gpus >= 0),
    max_gpus_per_job                INTEGER NOT NULL CHECK (max_gpus_per_job >= 0),
    max_gpu_mem_gb                  DOUBLE  NOT NULL CHECK (max_gpu_mem_gb >= 0),
    max_runtime_hours               DOUBLE  NOT NULL CHECK (max_runtime_hours >= 0),
    monthly_budget_gpu_hours        DOUBLE  NOT NULL CHECK (monthly_budget_gpu_hours >= 0),
    pilot_required_above_gpu_hours  DOUBLE  NOT NULL DEFAULT 50,
    budget_basis_production         VARCHAR NOT NULL DEFAULT 'upper',
    budget_basis_exploratory        VARCHAR NOT NULL DEFAULT 'median',
    budget_basis_retraining         VARCHAR NOT NULL DEFAULT 'upper',
    preemptible_partitions          VARCHAR[] NOT NULL DEFAULT [],
    policy_version                  VARCHAR NOT NULL,
    -- the team's colour in the dashboard's figures, '#RRGGBB' (version 2; NULL: a colour derived
    -- from the name). Not policy: it is not part of policy_version.
    colour                          VARCHAR,
    -- steps/s beyond a pilot's accelerators: each added one adds this share of one (version 5; docs/rules.md,
    -- Pilot estimates). A ledger upgraded to version 5 has the column without NOT NULL and CHECK (DuckDB
    -- adds neither to an existing table with IF NOT EXISTS): teams.toml's validation holds it to 0..1
    -- there, and the gate reads NULL as 1.0.
    scaling_efficiency              DOUBLE  NOT NULL DEFAULT 1.0
                                    CHECK (scaling_efficiency >= 0 AND scaling_efficiency <= 1),
    -- Slurm (version 5; lib/slurm/limits.py): a gated job's time limit stops it at its stop policy's
    -- spend limit; and lowered to the calibrated upper wall clock plus a margin. An upgraded ledger
    -- has them without NOT NULL (as scaling_efficiency); the gate reads NULL as the default.
    enforce_spend_limit             BOOLEAN NOT NULL DEFAULT true,
    set_time_limit                  BOOLEAN NOT NULL DEFAULT false,
    -- days a deferred request waits in the queue before it expires (version 7; NULL in older rows:
    -- the default, lib.ledger.teams_file.LATER_KEYS)
    queue_max_age_days              INTEGER
);

-- The cluster's physical accelerators per pool (version 7): one row per capacity type with a
-- [pools.<type>] table in data/teams.toml (source 'teams-file'). No row: no pool check for that type.
CREATE TABLE IF NOT EXISTS pools (
    pool        VARCHAR PRIMARY KEY CHECK (pool IN ('stable', 'preemptible')),
    gpus        INTEGER NOT NULL CHECK (gpus >= 0),
    source      VARCHAR NOT NULL
);

-- GPU-hour prices from data/teams.toml [prices] (version 2): one row per capacity type that has a
-- price. A capacity type without a row has no price: the dashboard shows no money for it, never 0.
CREATE TABLE IF NOT EXISTS prices (
    capacity            VARCHAR PRIMARY KEY CHECK (capacity IN ('stable', 'preemptible')),
    price_per_gpu_hour  DOUBLE  NOT NULL CHECK (price_per_gpu_hour >= 0 AND isfinite(price_per_gpu_hour)),
    currency            VARCHAR NOT NULL CHECK (regexp_full_match(currency, '[A-Z]{3}'))
);

CREATE TABLE IF NOT EXISTS snapshots (
    snapshot    VARCHAR PRIMARY KEY,
    team        VARCHAR,            -- NULL: usable by every team
    created_at  TIMESTAMP
);

-- One row per run ID. The estimate and the observed spend of a run live here together, whichever
-- source (csv, sacct, submit, finish, demo) brought them. A reservation is a run with reserved_* set.
CREATE TABLE IF NOT EXISTS runs (
    run_id                      VARCHAR PRIMARY KEY,
    team                        VARCHAR NOT NULL,
    kind                        VARCHAR NOT NULL CHECK (kind IN ('exploratory', 'production', 'retraining')),
    capacity                    VARCHAR NOT NULL DEFAULT 'stable' CHECK (capacity IN ('stable', 'preemptible')),
    gpus                        INTEGER NOT NULL CHECK (gpus >= 0),
    gpu_mem_gb                  DOUBLE,
    data_snapshot               VARCHAR,
    job_name                    VARCHAR,
    -- the estimate (GPU-hours) and where it came from: pilot | stated | requested (time limit x GPUs,
    -- i.e. requested, not measured)
    estimated_gpu_hours         DOUBLE CHECK (estimated_gpu_hours >= 0),
    estimate_source             VARCHAR CHECK (estimate_source IN ('pilot', 'stated', 'requested')),
    est_compute_gpu_hours       DOUBLE,
    est_checkpoint_gpu_hours    DOUBLE,
    est_eval_gpu_hours          DOUBLE,
    est_data_loading_gpu_hours  DOUBLE,
    est_restart_gpu_hours       DOUBLE,
    budget_gpu_hours            DOUBLE CHECK (budget_gpu_hours >= 0),
    max_runtime_hours           DOUBLE CHECK (max_runtime_hours >= 0),
    -- the reservation: window and GPU-hours held for the run
    reserved_from               TIMESTAMP,
    reserved_until              TIMESTAMP,
    reserved_gpu_hours          DOUBLE CHECK (reserved_gpu_hours >= 0),
    started_at                  TIMESTAMP,
    ended_at                    TIMESTAMP,
    -- observed spend (GPU-hours) and its items
    actual_gpu_hours            DOUBLE CHECK (actual_gpu_hours >= 0),
    act_checkpoint_gpu_hours    DOUBLE,
    act_retry_gpu_hours         DOUBLE,
    act_eval_gpu_hours          DOUBLE,
    act_lost_work_gpu_hours     DOUBLE,
    -- how it stopped: completed | early-stop | budget | wall-clock | failed-steps | preempted |
    -- failed | cancelled | out-of-memory | node-fail | requeued (NULL while unfinished)
    stop_reason                 VARCHAR,
    interruptions               INTEGER CHECK (interruptions >= 0),
    restarts                    INTEGER CHECK (restarts >= 0),
    artifact_status             VARCHAR CHECK (artifact_status IN ('complete', 'incomplete', 'none')),
    last_valid_checkpoint       VARCHAR,
    full_evaluation             BOOLEAN,
    holdout_reads               INTEGER CHECK (holdout_reads >= 0),
    holdout_allowance           INTEGER CHECK (holdout_allowance >= 0),
    source                      VARCHAR NOT NULL,
    updated_at                  TIMESTAMP NOT NULL
);

CREATE TABLE IF NOT EXISTS pilots (
    run_id                       VARCHAR NOT NULL,
    measured_at                  TIMESTAMP NOT NULL,
    steps_per_second             DOUBLE,
    worst_case_steps_per_second  DOUBLE,
    worst_case_share             DOUBLE,
    peak_mem_gb                  DOUBLE,
    checkpoint_write_s           DOUBLE,
    planned_steps                BIGINT,
    checkpoint_interval_steps    BIGINT,
    pilot_json                   VARCHAR NOT NULL
);

CREATE SEQUENCE IF NOT EXISTS decision_seq START 1;

-- Append-only: every check (when recorded) and every submit.
CREATE TABLE IF NOT EXISTS decisions (
    decision_id     BIGINT PRIMARY KEY DEFAULT nextval('decision_seq'),
    decided_at      TIMESTAMP NOT NULL,
    run_id          VARCHAR,
    team            VARCHAR,
    kind            VARCHAR,
    state           VARCHAR NOT NULL CHECK (state IN ('admit', 'defer', 'reject')),
    reason_codes    VARCHAR[] NOT NULL,
    judged_gpu_hours DOUBLE,
    reserved_gpu_hours DOUBLE,
    policy_version  VARCHAR,
    origin          VARCHAR NOT NULL,   -- cli | slurm | app | demo
    request_json    VARCHAR NOT NULL,
    decision_json   VARCHAR NOT NULL,
    -- who asked (version 3): a signed-in identity, an OS user; NULL where not known (older rows)
    actor           VARCHAR
);

CREATE SEQUENCE IF NOT EXISTS audit_seq START 1;

-- Append-only (version 3): who wrote what, and when. One row per import (from the app or
-- `python -m lib import`), per policy export from the dashboard, per `teams` load, finished run and
-- demo build. actor: the signed-in identity (e-mail), "local" for the app in local mode,
-- "NAME (uid N)" for an OS user.
CREATE TABLE IF NOT EXISTS audit (
    audit_id        BIGINT PRIMARY KEY DEFAULT nextval('audit_seq'),
    written_at      TIMESTAMP NOT NULL,
    actor           VARCHAR NOT NULL,
    origin          VARCHAR NOT NULL,   -- cli | app | slurm (the gate server)
    action          VARCHAR NOT NULL,   -- import | policy-export | teams | finish | demo | cluster-windows
    file_name       VARCHAR,            -- the uploaded or named file, as its user named it
    format          VARCHAR,            -- csv | sacct | toml
    rows_inserted   INTEGER CHECK (rows_inserted >= 0),
    rows_updated    INTEGER CHECK (rows_updated >= 0),
    rows_unchanged  INTEGER CHECK (rows_unchanged >= 0),
    detail          VARCHAR             -- e.g. the teams a policy export changes
);

-- Derived (version 4): each team's GPU-hours per week for the demand forecast, kept by every write
-- that changes runs (lib/ledger/team_weeks.py says how, and rebuilds it from runs). week: the
-- Monday (UTC) of the week runs started; gpu_hours: their actual GPU-hours once ended, else reserved.
CREATE TABLE IF NOT EXISTS team_weeks (
    team        VARCHAR NOT NULL,
    week        DATE NOT NULL,
    gpu_hours   DOUBLE NOT NULL,
    PRIMARY KEY (team, week)
);

-- Append-only (version 5): the valid checkpoints a started run saved (`python -m lib checkpoint`).
-- The latest is the run's last_valid_checkpoint; work before it is kept when the run is interrupted.
CREATE TABLE IF NOT EXISTS checkpoints (
    run_id          VARCHAR NOT NULL,
    name            VARCHAR NOT NULL,      -- the checkpoint's name or path, as the job gave it
    saved_at        TIMESTAMP NOT NULL,
    recorded_at     TIMESTAMP NOT NULL,
    PRIMARY KEY (run_id, name, saved_at)
);

-- Append-only (version 5): each interruption of a started run (preemption, requeue, node failure,
-- budget breach), the attempt it ended and the recovery decision taken (lib/ledger/recovering.py),
-- or an attempt of a requeued job seen only in a sacct import (source 'sacct': no decision, so
-- action and decision_json are NULL; lib/ledger/imports/sacct.py).
-- attempt_gpu_hours: what the attempt billed; lost_gpu_hours: of it, the work not kept at a
-- checkpoint; lost_given_gpu_hours: the caller's number when it gave one.
CREATE SEQUENCE IF NOT EXISTS interruption_seq START 1;
CREATE TABLE IF NOT EXISTS interruptions (
    interruption_id      BIGINT PRIMARY KEY DEFAULT nextval('interruption_seq'),
    run_id               VARCHAR NOT NULL,
    event                VARCHAR NOT NULL CHECK (event IN ('preempted', 'requeued', 'node-fail', 'budget')),
    occurred_at          TIMESTAMP NOT NULL,
    attempt              INTEGER NOT NULL CHECK (attempt >= 1),
    attempt_started_at   TIMESTAMP NOT NULL,
    attempt_gpu_hours    DOUBLE NOT NULL CHECK (attempt_gpu_hours >= 0),
    lost_gpu_hours       DOUBLE NOT NULL CHECK (lost_gpu_hours >= 0),
    lost_given_gpu_hours DOUBLE,
    action               VARCHAR CHECK (action IN ('resume', 'restart', 'end')),   -- NULL: not decided by the gate
    decision_json        VARCHAR,
    source               VARCHAR NOT NULL,   -- cli | slurm | sacct
    recorded_at          TIMESTAMP NOT NULL,
    actor                VARCHAR,
    UNIQUE (run_id, event, occurred_at)
);

-- Budget alerts (version 5): each crossing of a team's thresholds, once per (team, alert, month),
-- and whether the webhook has taken it (lib/ledger/alert_log.py). sent_at NULL: not yet delivered.
CREATE TABLE IF NOT EXISTS alerts (
    team            VARCHAR NOT NULL,
    alert           VARCHAR NOT NULL,     -- budget-80 | budget-100 | runout-p50 | runout-p90 | ...
    month           VARCHAR NOT NULL,     -- YYYY-MM (UTC)
    raised_at       TIMESTAMP NOT NULL,
    payload_json    VARCHAR NOT NULL,     -- the JSON body sent
    sent_at         TIMESTAMP,
    attempts        INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_error      VARCHAR,
    -- the run that is sending it and until when its claim holds (version 8; NULL: unclaimed)
    claimed_by      VARCHAR,
    claimed_until   TIMESTAMP,
    PRIMARY KEY (team, alert, month)
);

-- The cluster's capacity windows (version 6): the spans in which Slurm holds GPUs back from the
-- gate's requests (its reservations: maintenance, reservations for other users or accounts), as the
-- last sync from `source` (e.g. scontrol) read them; a sync replaces that source's set
-- (lib/ledger/cluster_windows.py). pool: the capacity type held, NULL for every pool; accounts,
-- users: who may still run inside, as Slurm lists them ('-name': excluded). A recurring reservation
-- is one row per occurrence (same name, another start).
CREATE TABLE IF NOT EXISTS cluster_windows (
    name        VARCHAR NOT NULL,
    start_at    TIMESTAMP NOT NULL,
    end_at      TIMESTAMP NOT NULL,
    gpus        INTEGER NOT NULL CHECK (gpus >= 0),
    pool        VARCHAR CHECK (pool IN ('stable', 'preemptible')),
    accounts    VARCHAR[] NOT NULL DEFAULT [],
    users       VARCHAR[] NOT NULL DEFAULT [],
    source      VARCHAR NOT NULL,
    updated_at  TIMESTAMP NOT NULL,
    PRIMARY KEY (source, name, start_at),
    CHECK (end_at > start_at)
);
