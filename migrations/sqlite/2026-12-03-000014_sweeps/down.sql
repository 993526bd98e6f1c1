DROP TABLE sweep_trials;
DROP TABLE sweeps;
