-- Who a training belongs to and who created it ('' before auth: the
-- anonymous cluster of --auth none).
ALTER TABLE trainings ADD COLUMN team TEXT NOT NULL DEFAULT '';
ALTER TABLE trainings ADD COLUMN creator TEXT NOT NULL DEFAULT '';
CREATE INDEX trainings_team_state_idx ON trainings (team, state);

-- Bearer tokens: the secret is stored only as its SHA-256.
CREATE TABLE tokens (
    id             TEXT PRIMARY KEY NOT NULL,
    team           TEXT NOT NULL,
    name           TEXT NOT NULL,
    role           TEXT NOT NULL,
    secret_sha256  TEXT NOT NULL UNIQUE,
    creator        TEXT NOT NULL,
    create_time    TIMESTAMP NOT NULL,
    expire_time    TIMESTAMP,
    revoke_time    TIMESTAMP,
    UNIQUE (team, name)
);

-- GPU quotas and queued-training caps per team.
CREATE TABLE team_quotas (
    team         TEXT PRIMARY KEY NOT NULL,
    gpus         INTEGER,
    max_queued   INTEGER,
    update_time  TIMESTAMP NOT NULL
);

-- Every change and every denial: who, what, when, how it ended.
CREATE TABLE audit_events (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    time         TIMESTAMP NOT NULL,
    actor_kind   TEXT NOT NULL,
    actor        TEXT NOT NULL,
    actor_team   TEXT NOT NULL,
    method       TEXT NOT NULL,
    target       TEXT NOT NULL,
    target_team  TEXT NOT NULL,
    code         TEXT NOT NULL,
    detail       TEXT NOT NULL
);
CREATE INDEX audit_events_time_idx ON audit_events (time, id);
CREATE INDEX audit_events_team_idx ON audit_events (target_team, time, id);
