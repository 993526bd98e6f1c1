DROP TABLE coordinator_lease;
