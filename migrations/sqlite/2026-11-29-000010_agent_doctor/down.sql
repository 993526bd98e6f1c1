ALTER TABLE agents DROP COLUMN doctor_json;
