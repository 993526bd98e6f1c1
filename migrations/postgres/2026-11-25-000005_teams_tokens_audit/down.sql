DROP TABLE audit_events;
DROP TABLE team_quotas;
DROP TABLE tokens;
DROP INDEX trainings_team_state_idx;
ALTER TABLE trainings DROP COLUMN creator;
ALTER TABLE trainings DROP COLUMN team;
