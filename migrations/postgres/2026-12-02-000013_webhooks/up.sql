-- Webhooks (docs/api.md, "Webhooks"): a team's HTTP endpoints told when its
-- trainings end, fail or are preempted, and of alerts. The secret signs
-- each body (HMAC-SHA256); it is kept to sign, shown once when added.
CREATE TABLE webhooks (
    id          TEXT PRIMARY KEY,
    team        TEXT NOT NULL,
    url         TEXT NOT NULL,
    -- Comma-separated: ended, failed, preempted, alert.
    events      TEXT NOT NULL,
    format      TEXT NOT NULL CHECK (format IN ('json', 'slack')),
    secret      TEXT NOT NULL,
    creator     TEXT NOT NULL,
    create_time TIMESTAMP NOT NULL
);
CREATE INDEX webhooks_team_idx ON webhooks (team, id);
