DROP TABLE best_checkpoints;
