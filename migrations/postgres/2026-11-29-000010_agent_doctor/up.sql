-- The latest host doctor report per agent (RunDoctor), as JSON.
ALTER TABLE agents ADD COLUMN doctor_json TEXT;
