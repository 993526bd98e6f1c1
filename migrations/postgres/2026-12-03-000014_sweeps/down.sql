DROP TABLE sweep_rungs;
DROP TABLE sweep_trials;
DROP TABLE sweeps;
