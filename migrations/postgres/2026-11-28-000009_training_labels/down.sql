DROP TABLE training_labels;
ALTER TABLE trainings DROP COLUMN labels_json;
