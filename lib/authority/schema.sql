-- The shared authority's tables in PostgreSQL: what several clusters' gates decide against together.
-- Created by `python -m lib authority init` (idempotent); its version is meta.schema_version.
-- Times are naive UTC (timestamp without time zone), as in the ledger. Units: GPU-hours, accelerators.
CREATE SCHEMA IF NOT EXISTS training_gate;

CREATE TABLE IF NOT EXISTS training_gate.meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);

-- One row per team: its policy (lib.gate.contracts.Policy as JSON) and a version that every change
-- of the team's policy, holds or spend moves on. Deciders lock the row (SELECT ... FOR UPDATE), or
-- write only if the version is the one they decided on: either way one team's decisions serialise.
CREATE TABLE IF NOT EXISTS training_gate.teams (
    team       text PRIMARY KEY,
    policy     jsonb NOT NULL,
    version    bigint NOT NULL DEFAULT 1,
    updated_at timestamp NOT NULL
);

-- A reservation held against the team's quota and month budget, by the cluster that admitted it.
-- Held while released_at is NULL and reserved_until has not passed.
CREATE TABLE IF NOT EXISTS training_gate.holds (
    cluster            text NOT NULL,
    run_id             text NOT NULL,
    team               text NOT NULL,
    kind               text NOT NULL,
    gpus               integer NOT NULL CHECK (gpus > 0),
    reserved_gpu_hours double precision NOT NULL CHECK (reserved_gpu_hours >= 0),
    reserved_from      timestamp NOT NULL,
    reserved_until     timestamp,
    held_at            timestamp NOT NULL,
    offline            boolean NOT NULL DEFAULT false,  -- admitted within the cluster's share while unreachable
    released_at        timestamp,
    released_why       text,                            -- finish | recover-end | unanswered | reconciled
    PRIMARY KEY (cluster, run_id)
);
CREATE INDEX IF NOT EXISTS holds_held ON training_gate.holds (team) WHERE released_at IS NULL;

-- What a finished run spent, once per (cluster, run): the month's spend is the sum by ended_at.
CREATE TABLE IF NOT EXISTS training_gate.spend (
    cluster     text NOT NULL,
    run_id      text NOT NULL,
    team        text NOT NULL,
    ended_at    timestamp NOT NULL,
    gpu_hours   double precision NOT NULL CHECK (gpu_hours >= 0),
    recorded_at timestamp NOT NULL,
    PRIMARY KEY (cluster, run_id)
);
CREATE INDEX IF NOT EXISTS spend_by_month ON training_gate.spend (team, ended_at);

INSERT INTO training_gate.meta VALUES ('schema_version', '1') ON CONFLICT (key) DO NOTHING;
